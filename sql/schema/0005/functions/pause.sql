CREATE OR REPLACE FUNCTION pgq.pause(queue_name text) RETURNS boolean
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
    INSERT INTO pgq.paused_queues (queue) VALUES (queue_name) ON CONFLICT (queue) DO NOTHING;
    RETURN FOUND;
END;
$fn$;

COMMENT ON FUNCTION pgq.pause(text) IS
    'Pause a queue: no worker claims its jobs once this returns (true: newly paused, false: paused '
    'already). Enqueueing still works; running jobs finish. Needs an administrator (pgq_admin).';
