CREATE OR REPLACE FUNCTION pgq.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text, queue text, kind text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    ids      bigint[];
    statuses text[];
    names    text[];
    kinds    text[];
    n_woke   bigint;
    scope    text[];
BEGIN
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        SELECT c.queues INTO scope FROM pgq.caller_scope() c;
    END IF;
    -- Revision 0033: a job that used its last attempt moves to pgq.finished_jobs (a delete and an
    -- insert in this statement), the others are queued again where they are.
    WITH expired AS (
        SELECT j.id
        FROM pgq.live_jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now() AND (scope IS NULL OR j.queue = ANY(scope))
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        -- FOR UPDATE: the lock of the delete below, so that a row a producer holds FOR KEY SHARE (a
        -- new child's parent) is skipped too, not waited for.
        FOR UPDATE SKIP LOCKED
    ),
    requeued AS (
        UPDATE pgq.live_jobs j
        SET status = 'queued',
            run_at = now(),
            last_error = 'lease expired at ' || j.lease_expires_at::text
                         || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
            lease_token = NULL,
            lease_expires_at = NULL
        FROM expired e
        WHERE j.id = e.id AND j.attempts < j.max_attempts
        RETURNING j.id, j.status, j.queue, j.kind
    ),
    spent AS (
        DELETE FROM pgq.live_jobs j
        USING expired e
        WHERE j.id = e.id AND j.attempts >= j.max_attempts
        RETURNING j.*
    ),
    failed AS (
        INSERT INTO pgq.finished_jobs (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts,
                                       dedupe_key, lease_token, lease_expires_at, claimed_by, last_error, result,
                                       input_watermark, done_watermark, created_at, started_at, finished_at,
                                       progress, awaited, pending_parents, has_dependents, limited, group_key,
                                       trace_context, sequence_key)
        SELECT s.id, s.queue, s.kind, s.payload, s.priority, 'failed', now(), s.attempts, s.max_attempts,
               s.dedupe_key, NULL, NULL, s.claimed_by,
               'lease expired at ' || s.lease_expires_at::text
               || ' (attempt ' || s.attempts::text || ', worker ' || coalesce(s.claimed_by, '?') || ')',
               s.result, s.input_watermark, s.done_watermark, s.created_at, s.started_at, now(),
               s.progress, s.awaited, s.pending_parents, s.has_dependents, s.limited, s.group_key,
               s.trace_context, s.sequence_key
        FROM spent s
        RETURNING finished_jobs.id, finished_jobs.status, finished_jobs.queue, finished_jobs.kind
    ),
    rescued AS (
        SELECT q.id, q.status, q.queue, q.kind FROM requeued q
        UNION ALL
        SELECT f.id, f.status, f.queue, f.kind FROM failed f
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
    )
    SELECT array_agg(r.id ORDER BY r.id), array_agg(r.status::text ORDER BY r.id),
           array_agg(r.queue ORDER BY r.id), array_agg(r.kind ORDER BY r.id), (SELECT w.n FROM wake w)
    INTO ids, statuses, names, kinds, n_woke
    FROM rescued r;
    RETURN QUERY SELECT r.id, r.status, r.queue, r.kind, n_woke
                 FROM unnest(ids, statuses, names, kinds) AS r(id, status, queue, kind);
    PERFORM pgq.after_finish(ids);
    PERFORM pgq.settle(1000);
END;
$fn$;

COMMENT ON FUNCTION pgq.rescue(integer) IS
    'Take back up to p_limit attempts whose lease expired (sql/job_rescue.sql): requeued, or failed when '
    'they used their last attempt. Touches no row whose lease still runs. Then settles (pgq.settle).';
