CREATE OR REPLACE FUNCTION pgq.pause(queue_name text, actor text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fn$
BEGIN
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'pgq.pause: the queue name must be a non-empty text' USING ERRCODE = '22023';
    END IF;
    -- Locked before the insert, never upgraded after it: two concurrent pauses queue up here
    -- instead of deadlocking.
    LOCK TABLE pgq.paused_queues IN ACCESS EXCLUSIVE MODE;
    INSERT INTO pgq.paused_queues (queue, paused_by, paused_role)
    VALUES (queue_name, coalesce(nullif(pause.actor, ''), session_user), session_user)
    ON CONFLICT (queue) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgq.control_audit (action, target, actor) VALUES ('pause', queue_name, nullif(pause.actor, ''));
    RETURN true;
END;
$fn$;

COMMENT ON FUNCTION pgq.pause(text, text) IS
    'Pause a queue: no worker claims its jobs once this returns (true: newly paused, false: paused '
    'already). Enqueueing still works; running jobs finish. Records `actor` (NULL: the session''s role) '
    'as who paused it, and the session''s role, in pgq.paused_queues and pgq.control_audit. Needs an '
    'administrator (pgq_admin).';
