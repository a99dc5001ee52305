CREATE OR REPLACE FUNCTION pgq.heartbeat_skip(p_ids bigint[], p_tokens uuid[], p_lease_s double precision[],
                                   p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT h.id, h.token FROM unnest(p_ids, p_tokens) AS h(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    renewed AS (
        UPDATE pgq.jobs j
        SET lease_expires_at = CASE WHEN p_wait THEN clock_timestamp() ELSE now() END
                               + make_interval(secs => h.lease_s),
            progress = coalesce(h.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) h
        WHERE j.id = ANY(p_ids) AND j.id = h.id AND j.lease_token = h.token
        RETURNING j.id, j.lease_expires_at
    )
    SELECT r.id, r.lease_expires_at FROM renewed r
    UNION ALL
    SELECT b.id, NULL::timestamptz FROM busy b
    WHERE NOT p_wait;
END;
$fn$;

COMMENT ON FUNCTION pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean) IS
    'pgq.heartbeat for rows another transaction may hold (sql/job_heartbeat_skip.sql): rows skipped come '
    'back with a NULL expiry (busy).';
