-- pgq schema, revision 0002: what lets the roles of `pgq roles` (sql/roles/pgq_roles.sql) be narrow.
-- Creates no role and grants nothing to any role: roles are cluster-wide, and creating them needs
-- CREATEROLE, which the user running `pgq migrate` may not have. Touches nothing outside schema pgq.

-- Enqueue runs with the rights of the function's owner, so a producer needs only EXECUTE on it: no
-- INSERT on pgq.jobs, no USAGE on its id sequence, and above all no UPDATE on pgq.jobs, which the
-- dedupe path's INSERT ... ON CONFLICT DO UPDATE (raising an active job's input watermark) would
-- otherwise demand of the caller. The function takes only bound values, builds no SQL from them and
-- names every object with its schema; the pinned search_path (pg_catalog first, pg_temp last) keeps
-- a caller's own functions, operators and temporary tables from standing in for the built-ins.
ALTER FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                text[], bigint[], integer[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Functions are executable by PUBLIC by default; a definer function must not be. EXECUTE is granted
-- to pgq_producer (and so to pgq_worker) by `pgq roles`. The owner of the schema keeps it.
REVOKE EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[],
                                            double precision[], text[], bigint[], integer[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer) FROM PUBLIC;

-- A worker needs UPDATE on pgq.jobs (claim, complete, fail, heartbeat, snooze, rescue are all
-- updates of active jobs), and table privileges cannot tell a worker's update from an administrator's
-- cancel or retry. This trigger can: it fires only on the two transitions that belong to
-- administrators, cancelling a job and re-opening a finished one (its WHEN clause is evaluated
-- without calling the function, so the worker's hot path never runs it), and lets them through only
-- for a role that may also DELETE from pgq.jobs, the privilege that marks an administrator: the
-- table's owner, pgq_admin, superusers, and any role a DBA granted ALL. pgq_worker lacks it.
-- Checking a privilege rather than a role name keeps role names out of the schema.
-- pgq:function jobs_guard_admin_transition

CREATE TRIGGER jobs_guard_admin_transition
    BEFORE UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' OR OLD.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();
