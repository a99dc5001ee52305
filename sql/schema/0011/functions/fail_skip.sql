CREATE OR REPLACE FUNCTION pgq.fail_skip(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT s.id, s.token FROM unnest(p_ids, p_tokens) AS s(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    failed AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                          THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + make_interval(secs => coalesce(
                              f.retry_in,
                              greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
                     END,
            last_error = f.error,
            progress = coalesce(f.progress, j.progress),
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
                 AS u(id, token, error, retry_in, final, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) f
        WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
        RETURNING j
    )
    SELECT x.j, false FROM failed x
    UNION ALL
    SELECT j, true
    FROM pgq.jobs j
    WHERE NOT p_wait AND j.id = ANY(p_ids)
      AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b));
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql): locks first, in id order, SKIP '
    'LOCKED unless p_wait; rows skipped come back unchanged with busy true.';
