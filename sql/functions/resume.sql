CREATE OR REPLACE FUNCTION pgq.resume(queue_name text, actor text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    DELETE FROM pgq.paused_queues WHERE queue = queue_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgq.control_audit (action, target, actor) VALUES ('resume', queue_name, nullif(resume.actor, ''));
    PERFORM pg_notify('pgq', CASE WHEN octet_length(queue_name) <= 1000 THEN queue_name ELSE '*' END);
    RETURN true;
END;
$fn$;

COMMENT ON FUNCTION pgq.resume(text, text) IS
    'Resume a paused queue (true: it was paused) and wake idle workers; records it in '
    'pgq.control_audit with `actor` (NULL: not named) and the session''s role. Needs an administrator.';
