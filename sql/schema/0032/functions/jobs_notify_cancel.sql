CREATE OR REPLACE FUNCTION pgq.jobs_notify_cancel() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- Revision 0032: the md5 of the lease token, not the token. Any role that may connect can LISTEN,
    -- and a claim's jobs share one token: the token itself would let a listener finish the jobs
    -- still running under it.
    PERFORM pg_notify('pgq_cancel', OLD.id::text || ':' || md5(OLD.lease_token::text));
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_notify_cancel() IS
    'Trigger of pgq.jobs: a running job that becomes cancelled notifies channel pgq_cancel with '
    '''<id>:<md5 of its lease token>'' so that its worker interrupts the handler.';
