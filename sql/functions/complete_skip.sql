CREATE OR REPLACE FUNCTION pgq.complete_skip(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                                  p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.complete_skip_core(p_ids, p_tokens, p_results, p_watermarks, p_progress, p_wait);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;

COMMENT ON FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) IS
    'pgq.complete for rows another transaction may hold (sql/job_complete_skip.sql): held rows are '
    'skipped unless p_wait and reported busy. Then pgq.after_finish.';
