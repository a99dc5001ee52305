CREATE OR REPLACE FUNCTION pgq.complete_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                             p_watermarks bigint[], p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    -- pgq.complete_skip_core waiting for every row it was sent (none comes back busy).
    RETURN QUERY SELECT * FROM pgq.complete_skip_core(p_ids, p_tokens, p_results, p_watermarks, p_progress, true);
END;
$fn$;
