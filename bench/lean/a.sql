-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema. Layout A: a live table that
-- holds only the jobs that can still run (waiting, queued, running), with few indexes, and
-- history.sql's @schema@.job_history for finished ones. An acknowledgement moves the row: one
-- statement deletes it from the live table and inserts it into the history.
-- The enqueue is sql/job_insert.sql with pgq.jobs replaced by @schema@.jobs (the script does that);
-- the claim and heartbeats are live_claim.sql's; the indexes a_indexes.sql's (A) or h_indexes.sql's
-- (H: no index names a column the claim changes, so that the claim can be a HOT update).
-- @fillfactor@: 90 as pgq.jobs, 50 or 40 (a claimed row's new version then fits on its page).
-- Auxiliary tables (pauses, limits, key watermarks, dependencies, waits) are pgq's own.

-- One sequence numbers the jobs of the live table and of the history.
CREATE SEQUENCE @schema@.jobs_id_seq;

-- Columns in the order of what changes least: those a claim writes (status to started_at) come
-- last, so that a claimed version on the row's page is logged as the bytes after its unchanged
-- prefix (PostgreSQL logs an update on the same page as what differs from the old version).
CREATE TABLE @schema@.jobs (
@job_columns@
    status           pgq.job_status NOT NULL DEFAULT 'queued',   -- waiting, queued or running only
    attempts         integer NOT NULL DEFAULT 0,
    lease_token      uuid,
    lease_expires_at @schema@.lease_time,
    claimed_by       text,
    started_at       timestamptz,
    progress         @schema@.job_json
) WITH (fillfactor = @fillfactor@, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- The acknowledgement: pgq.complete's fencing (the row of an attempt still held under its token)
-- and dirty re-runs (a keyed job whose key got a newer watermark while it ran goes back to queued,
-- in the live table), one statement. A finished row leaves the live table and enters the history
-- in the same statement: a snapshot sees it in one of them, never in both or neither.
@ack_head@
    gone AS (
        -- Fenced: only attempts still held under their tokens. A job whose key got a newer
        -- watermark while it ran (the negation of `again`'s test below) is not finished.
        DELETE FROM @schema@.jobs j
        USING done d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
          AND NOT @schema@.rerun(j.input_watermark, d.watermark, j.queue, j.dedupe_key)
        RETURNING j.*, d.result AS new_result, d.watermark AS new_watermark, d.progress AS new_progress
    ),
    again AS (
        -- The dirty re-runs stay live, queued again with a fresh series of attempts.
        UPDATE @schema@.jobs j
        SET status = 'queued', attempts = 0, run_at = now(), lease_token = NULL, lease_expires_at = NULL,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END
        FROM done d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
          AND @schema@.rerun(j.input_watermark, d.watermark, j.queue, j.dedupe_key)
        RETURNING j.id, j.queue
    ),
@ack_tail@

-- Rescue: an attempt whose lease expired goes back to queued, or, if it was the last, to the history
-- as failed.
CREATE FUNCTION @schema@.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH expired AS (
        SELECT j.id, j.attempts >= j.max_attempts AS last
        FROM @schema@.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    requeued AS (
        UPDATE @schema@.jobs j
        SET status = 'queued', run_at = now(), lease_token = NULL, lease_expires_at = NULL,
            last_error = 'lease expired at ' || j.lease_expires_at::text
        FROM expired e
        WHERE j.id = e.id AND NOT e.last
        RETURNING j.id
    ),
    gone AS (
        DELETE FROM @schema@.jobs j USING expired e WHERE j.id = e.id AND e.last RETURNING j.*
    ),
    failed AS (
        INSERT INTO @schema@.job_history
            (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key,
             claimed_by, last_error, input_watermark, done_watermark, created_at, started_at, finished_at,
             progress, awaited, pending_parents, has_dependents, limited, group_key, trace_context, sequence_key)
        SELECT g.id, g.queue, g.kind, g.payload, g.priority, 'failed', g.run_at, g.attempts, g.max_attempts,
               g.dedupe_key, g.claimed_by, 'lease expired at ' || g.lease_expires_at::text, g.input_watermark,
               g.done_watermark, g.created_at, g.started_at, now(), g.progress, g.awaited, g.pending_parents,
               g.has_dependents, g.limited, g.group_key, g.trace_context, g.sequence_key
        FROM gone g
        RETURNING job_history.id
    )
    SELECT r.id, 'queued' FROM requeued r
    UNION ALL
    SELECT f.id, 'failed' FROM failed f
$fn$;

-- A job by id, wherever it is (job_get, Queue.wait's read, explain, the dashboard's job page): the
-- live table's primary key first; the history only when the job is not live.
CREATE FUNCTION @schema@.get(p_id bigint)
RETURNS TABLE (id bigint, status text, queue text, attempts integer, result jsonb, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    (SELECT j.id, j.status::text, j.queue, j.attempts, NULL::jsonb, NULL::timestamptz
     FROM @schema@.jobs j WHERE j.id = p_id
     UNION ALL
     SELECT h.id, h.status::text, h.queue, h.attempts, h.result, h.finished_at
     FROM @schema@.job_history h WHERE h.id = p_id)
    LIMIT 1
$fn$;
