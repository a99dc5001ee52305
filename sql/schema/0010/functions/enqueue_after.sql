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

COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies.';
