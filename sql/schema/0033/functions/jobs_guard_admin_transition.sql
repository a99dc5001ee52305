CREATE OR REPLACE FUNCTION pgq.jobs_guard_admin_transition() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- Revision 0033: the privilege on pgq.jobs itself (the trigger fires on a partition of it).
    IF NOT has_table_privilege('pgq.jobs', 'DELETE') THEN
        RAISE EXCEPTION 'permission denied to % job %: role % may not cancel or retry jobs',
                        CASE WHEN NEW.status = 'cancelled' THEN 'cancel' ELSE 'retry' END, NEW.id, current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel, retry and purge need pgq_admin (see `pgq roles`)';
    END IF;
    RETURN NEW;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_guard_admin_transition() IS
    'Trigger of pgq.finished_jobs (revision 0033): cancelling a job (its arrival there as cancelled) or '
    're-opening or changing a finished one (an update there) needs DELETE on pgq.jobs (an administrator), so '
    'pgq_worker, which may update active jobs, cannot cancel or retry them.';
