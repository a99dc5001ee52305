CREATE OR REPLACE FUNCTION pgq.fail(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.fail_core(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress,
                                             p_lock_timeout);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;

COMMENT ON FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Fail attempts under their lease tokens (sql/job_fail.sql): retried later, or failed for good. '
    'Then pgq.after_finish.';
