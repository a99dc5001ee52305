-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema. Layout C, the minimal change:
-- today's one table (pgq.jobs' columns, CHECK constraints and triggers, copied by the script),
-- finished jobs kept in it as now, but only the indexes the hot path and the readers of finished
-- jobs need, the prototype's claim (live_claim.sql) and today's acknowledgement statement. The
-- enqueue is sql/job_insert.sql with pgq.jobs replaced by @schema@.jobs.
-- It measures what fewer indexes and leaner statements give without moving finished jobs.
--
-- No claim can be a HOT update here, nor in A: the claim must take the row out of the claim index
-- (or every later claim walks the running rows) and put it into the lease index that rescue reads.

CREATE TABLE @schema@.jobs (LIKE pgq.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
      autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);
ALTER TABLE @schema@.jobs ADD PRIMARY KEY (id);

-- What every job pays: the primary key, one claim index (jobs_claim_idx and jobs_claim_kind_idx,
-- and jobs_claim_limited_idx, merged), the lease index while it runs, the finished index after.
CREATE INDEX jobs_claim_idx ON @schema@.jobs (queue, kind, priority, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_running_idx ON @schema@.jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_finished_idx ON @schema@.jobs (finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
-- What only some jobs pay (keyed, grouped, dependent, retried, failed ones), as today.
CREATE UNIQUE INDEX jobs_dedupe_active_uq ON @schema@.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX jobs_dedupe_finished_idx ON @schema@.jobs (queue, dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL;
CREATE INDEX jobs_claim_group_idx ON @schema@.jobs (queue, kind, group_key, priority, run_at, id)
    WHERE status = 'queued' AND limited;
CREATE INDEX jobs_running_group_idx ON @schema@.jobs (kind, group_key) WHERE status = 'running' AND group_key IS NOT NULL;
CREATE INDEX jobs_waiting_idx ON @schema@.jobs (queue)
    WHERE status NOT IN ('queued', 'running', 'succeeded', 'failed', 'cancelled');
CREATE INDEX jobs_retrying_idx ON @schema@.jobs (queue) WHERE status = 'queued' AND last_error IS NOT NULL;
CREATE INDEX jobs_failed_idx ON @schema@.jobs (queue, finished_at) WHERE status = 'failed';

-- The acknowledgement is pgq.complete_core (sql/functions/complete_core.sql) on this table, one
-- PL/pgSQL level instead of pgq.complete's two, then pgq.after_finish (the script installs it).

-- Rescue, as pgq.rescue: an expired attempt is queued again, or failed if it was the last.
CREATE FUNCTION @schema@.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH expired AS (
        SELECT j.id FROM @schema@.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE @schema@.jobs j
    SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
        run_at = now(), last_error = 'lease expired at ' || j.lease_expires_at::text,
        lease_token = NULL, lease_expires_at = NULL,
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.status::text
$fn$;

-- A job by id: the primary key, as today.
CREATE FUNCTION @schema@.get(p_id bigint)
RETURNS TABLE (id bigint, status text, queue text, attempts integer, result jsonb, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT j.id, j.status::text, j.queue, j.attempts, j.result, j.finished_at FROM @schema@.jobs j WHERE j.id = p_id
$fn$;
