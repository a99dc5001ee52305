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
    WITH expired AS (
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now() AND (scope IS NULL OR j.queue = ANY(scope))
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
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
