-- Reverts revision 0012: pgq.enqueue_after locks its parents FOR NO KEY UPDATE and marks them
-- has_dependents, pgq.mark_awaited marks the job awaited, and the release trigger alone releases
-- children. (alembic/versions/0012_producer_locks.py then restores the trigger's body of 0009.)

-- What the old mechanism needs to see: parents with open edges marked, waits on the jobs.
UPDATE pgq.jobs j SET has_dependents = true
WHERE j.id IN (SELECT d.parent_id FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL)
  AND j.status IN ('waiting', 'queued', 'running') AND j.has_dependents IS NOT TRUE;
UPDATE pgq.jobs j SET awaited = true
WHERE j.id IN (SELECT a.job_id FROM pgq.awaited_jobs a)
  AND j.status IN ('waiting', 'queued', 'running') AND j.awaited IS NOT TRUE;

DROP FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text);
DROP FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean);
DROP FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text);
DROP FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean);
DROP FUNCTION pgq.cancel(bigint);
ALTER FUNCTION pgq.complete_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) RENAME TO complete;
ALTER FUNCTION pgq.complete_skip_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) RENAME TO complete_skip;
ALTER FUNCTION pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) RENAME TO fail;
ALTER FUNCTION pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    RENAME TO fail_skip;
ALTER FUNCTION pgq.cancel_core(bigint) RENAME TO cancel;

-- Revision 0011's rescue.
CREATE OR REPLACE FUNCTION pgq.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text, queue text, kind text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    rescued AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = now(),
            last_error = 'lease expired at ' || j.lease_expires_at::text
                         || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
        FROM expired e
        WHERE j.id = e.id
        RETURNING j.id, j.status, j.queue, j.kind
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
    )
    SELECT r.id, r.status::text, r.queue, r.kind, (SELECT w.n FROM wake w)
    FROM rescued r;
END;
$fn$;
COMMENT ON FUNCTION pgq.rescue(integer) IS
    'Take back up to p_limit attempts whose lease expired (sql/job_rescue.sql): requeued, or failed when '
    'they used their last attempt. Touches no row whose lease still runs.';

-- Revision 0010's enqueue_after.
CREATE OR REPLACE FUNCTION pgq.enqueue_after(
    kinds          text[],
    payloads       jsonb[],
    queues         text[],
    priorities     smallint[],
    run_ats        timestamptz[],
    delays         double precision[],
    max_attempts   integer[],
    run_on_failure boolean[],
    edge_jobs      integer[],
    edge_parents   bigint[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    missing bigint;
    tries integer := 0;  -- LOCK_TRIES: 50, about half a second of pauses
BEGIN
    IF cardinality(edge_jobs) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'pgq.enqueue_after: edge_jobs and edge_parents differ in length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The parents, all at once or none: NOWAIT in a subtransaction, whose failure releases the
    -- locks it took; then a pause holding none, and again (why: sql/schema/0008_workflow_locks.up.sql). After LOCK_TRIES tries
    -- it waits like any lock, so that a circle through the caller's own transaction (parents it
    -- locked in an earlier call) is still found and broken by PostgreSQL.
    IF cardinality(edge_parents) > 0 THEN
        LOOP
            BEGIN
                IF tries < 50 THEN
                    PERFORM 1 FROM pgq.jobs j
                    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
                    ORDER BY j.id
                    FOR NO KEY UPDATE OF j NOWAIT;
                ELSE
                    PERFORM 1 FROM pgq.jobs j
                    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
                    ORDER BY j.id
                    FOR NO KEY UPDATE OF j;
                END IF;
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                tries := tries + 1;
                PERFORM pg_sleep(0.001 * least(tries, 10));
            END;
        END LOOP;
    END IF;
    SELECT p INTO missing FROM unnest(edge_parents) AS p
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = p) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: there is no job % (never enqueued, or purged)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- Unfinished parents learn that their finish matters (the release trigger's WHEN clause).
    UPDATE pgq.jobs j SET has_dependents = true
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
      AND j.status IN ('waiting', 'queued', 'running') AND j.has_dependents IS NOT TRUE;

    RETURN QUERY
    WITH input AS (
        SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()) AS run_at,
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure, ord)
    ),
    edges AS (
        SELECT DISTINCT e.ord, e.parent_id, p.status AS parent_status
        FROM unnest(edge_jobs, edge_parents) AS e(ord, parent_id)
        JOIN pgq.jobs p ON p.id = e.parent_id
    ),
    state AS (
        SELECT u.ord,
               count(e.parent_id) FILTER (WHERE e.parent_status IN ('waiting', 'queued', 'running')) AS pending,
               min(e.parent_id) FILTER (WHERE e.parent_status IN ('failed', 'cancelled')
                                          AND NOT u.run_on_failure) AS doomed_by
        FROM input u
        LEFT JOIN edges e ON e.ord = u.ord
        GROUP BY u.ord
    ),
    ins AS (
        INSERT INTO pgq.jobs (id, kind, payload, queue, priority, run_at, max_attempts, status,
                              pending_parents, finished_at, last_error, limited)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END,
               u.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r)
        FROM input u JOIN state s ON s.ord = u.ord
        ORDER BY u.ord
        RETURNING pgq.jobs.id, pgq.jobs.queue, pgq.jobs.status
    ),
    deps AS (
        INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome)
        SELECT u.id, e.parent_id, NOT u.run_on_failure,
               CASE WHEN e.parent_status IN ('succeeded', 'failed', 'cancelled') THEN e.parent_status END
        FROM edges e JOIN input u ON u.ord = e.ord
    ),
    woke AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM ins r WHERE r.status = 'queued') q
    )
    SELECT u.ord, u.id FROM input u, woke ORDER BY u.ord;
END;
$fn$;

-- Revision 0007's mark_awaited.
CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET awaited = true
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running') AND j.awaited IS NOT TRUE
    RETURNING j.*;
$fn$;
COMMENT ON FUNCTION pgq.mark_awaited(bigint) IS
    'Mark a queued or running job awaited (Queue.wait): finishing it then notifies channel '
    'pgq_finished. Returns the job, or no row when it was not marked now.';

DROP FUNCTION pgq.settle(integer);
DROP FUNCTION pgq.after_finish(bigint[]);
DROP FUNCTION pgq.release_children(bigint[]);
DROP INDEX pgq.job_dependencies_open_idx;
DROP TABLE pgq.awaited_jobs;
