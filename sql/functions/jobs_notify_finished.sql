CREATE OR REPLACE FUNCTION pgq.jobs_notify_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pg_notify('pgq_finished', NEW.id::text);
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_notify_finished() IS
    'Trigger of pgq.jobs: an awaited job that finishes notifies channel pgq_finished with its id.';
