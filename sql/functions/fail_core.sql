CREATE OR REPLACE FUNCTION pgq.fail_core(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    -- pgq.fail_skip_core waiting for every row it was sent (none comes back busy).
    RETURN QUERY SELECT (f.job).* FROM pgq.fail_skip_core(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress,
                                                          true) f;
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Record failed attempts under their lease tokens (sql/job_fail.sql): the jobs still held, as updated.';
