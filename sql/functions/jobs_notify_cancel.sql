CREATE OR REPLACE FUNCTION pgq.jobs_notify_cancel() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- Revision 0034: a statement trigger of UPDATE on pgq.jobs, reading the rows it changed. An UPDATE
    -- that cancels a running job moves it to pgq.finished_jobs, which PostgreSQL performs as a delete
    -- and an insert: no row trigger of UPDATE fires, and the row that arrives may have its lease
    -- cleared. The token it ran under is the old row's. A row that arrives still leased is told by
    -- its arrival (pgq.jobs_guard_admin_transition), not here: one notice per job.
    PERFORM pg_notify('pgq_cancel', o.id::text || ':' || md5(o.lease_token::text))
    FROM pgq_changed n
    JOIN pgq_before o ON o.id = n.id
    WHERE n.status = 'cancelled' AND n.lease_token IS NULL AND o.status = 'running'
    ORDER BY o.id;
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_notify_cancel() IS
    'Trigger of pgq.jobs (statement, revision 0034): each running job that an UPDATE of pgq.jobs cancelled '
    'and cleared the lease of notifies channel pgq_cancel with ''<id>:<md5 of its lease token>'' so that its '
    'worker interrupts the handler. pgq''s own cancels notify themselves.';
