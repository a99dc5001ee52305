CREATE OR REPLACE FUNCTION pgq.lead(step text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    scope text;
BEGIN
    IF step IS NULL OR step NOT IN ('rescue', 'periodic', 'retention') THEN
        RAISE EXCEPTION 'pgq.lead: step must be rescue, periodic or retention, got %', coalesce(step, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The workers of a scoped role set rescue and enqueue ticks in their queues only: they elect
    -- their own leaders (rows '<step>:<prefix>', which the roles script adds).
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        SELECT c.prefix INTO scope FROM pgq.caller_scope() c;
    END IF;
    PERFORM 1 FROM pgq.leaders l WHERE l.step = lead.step || coalesce(':' || scope, '') FOR UPDATE SKIP LOCKED;
    RETURN FOUND;
END;
$fn$;

COMMENT ON FUNCTION pgq.lead(text) IS
    'Take the lock of maintenance step `step` (rescue, periodic, retention) for the caller''s transaction '
    'when it is free: true, this run is the leader; false, another transaction holds it. Needs pgq_worker.';
