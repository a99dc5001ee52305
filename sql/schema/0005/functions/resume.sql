CREATE OR REPLACE FUNCTION pgq.resume(queue_name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    DELETE FROM pgq.paused_queues WHERE queue = queue_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgq', CASE WHEN octet_length(queue_name) <= 1000 THEN queue_name ELSE '*' END);
    RETURN true;
END;
$fn$;

COMMENT ON FUNCTION pgq.resume(text) IS
    'Resume a paused queue (true: it was paused) and wake idle workers. Needs an administrator.';
