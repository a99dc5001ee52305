CREATE OR REPLACE FUNCTION pgq.error_set(p_id bigint, p_token uuid, p_error text)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE pgq.live_jobs j
    SET last_error = p_error
    WHERE j.id = p_id AND j.lease_token = p_token
    RETURNING j.id;
END;
$fn$;

COMMENT ON FUNCTION pgq.error_set(bigint, uuid, text) IS
    'Store last_error of a running attempt under its lease token (sql/job_error_set.sql).';
