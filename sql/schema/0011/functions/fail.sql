CREATE OR REPLACE FUNCTION pgq.fail(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
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
          ORDER BY u.id) f
    WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
    RETURNING j.*;
END;
$fn$;

COMMENT ON FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Record failed attempts under their lease tokens (sql/job_fail.sql): the jobs still held, as updated.';
