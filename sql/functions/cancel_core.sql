-- Revision 0012 renamed pgq.cancel (as 0007 defined it: sql/schema/0007/functions/cancel.sql) to
-- pgq.cancel_core; no migration includes this file, the drift test keeps it equal to the database.
CREATE OR REPLACE FUNCTION pgq.cancel_core(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET status = 'cancelled',
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = now()
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running')
    RETURNING j.*;
$fn$;

COMMENT ON FUNCTION pgq.cancel_core(bigint) IS
    'Cancel a queued or running job and return it (no row: no such job, or finished already). A '
    'running job''s worker is told to stop its handler. Needs an administrator (pgq_admin).';
