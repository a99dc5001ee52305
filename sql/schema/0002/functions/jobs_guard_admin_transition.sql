CREATE OR REPLACE FUNCTION pgq.jobs_guard_admin_transition() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NOT has_table_privilege(TG_RELID, 'DELETE') THEN
        RAISE EXCEPTION 'permission denied to % job %: role % may not cancel or retry jobs',
                        CASE WHEN NEW.status = 'cancelled' THEN 'cancel' ELSE 'retry' END, OLD.id, current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel, retry and purge need pgq_admin (see `pgq roles`)';
    END IF;
    RETURN NEW;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_guard_admin_transition() IS
    'Trigger of pgq.jobs: cancelling a job or re-opening a finished one needs DELETE on pgq.jobs (an '
    'administrator), so pgq_worker, which may update active jobs, cannot cancel or retry them.';
