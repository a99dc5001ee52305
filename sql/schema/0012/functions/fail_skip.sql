CREATE OR REPLACE FUNCTION pgq.fail_skip(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.fail_skip_core(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress,
                                                  p_wait);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql). Then pgq.after_finish.';
