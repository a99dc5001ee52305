CREATE OR REPLACE FUNCTION pgq.jobs_notify_cancel() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pg_notify('pgq_cancel', OLD.id::text || ':' || OLD.lease_token::text);
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_notify_cancel() IS
    'Trigger of pgq.jobs: a running job that becomes cancelled notifies channel pgq_cancel with '
    '''<id>:<lease token>'' so that its worker interrupts the handler.';
