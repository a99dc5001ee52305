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
