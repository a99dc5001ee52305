CREATE OR REPLACE FUNCTION pgq.complete(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                             p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.complete_core(p_ids, p_tokens, p_results, p_watermarks, p_progress, p_lock_timeout);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;

COMMENT ON FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) IS
    'Finish attempts successfully under their lease tokens (sql/job_complete.sql): one row per attempt '
    'still held, (id, new status, queues woken); lost leases are left out. Then pgq.after_finish.';
