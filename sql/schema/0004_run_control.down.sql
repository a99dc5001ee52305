-- Reverts revision 0004: the view as revision 0001 made it, no cancel function or notification, no
-- progress column (the progress values are lost).
-- Dropping the view drops its grants: run `pgq roles` again after this downgrade.
DROP VIEW pgq.running_jobs;
CREATE VIEW pgq.running_jobs AS
SELECT j.id, j.queue, j.kind, j.claimed_by, j.attempts, j.started_at,
       now() - j.started_at AS running_for, j.lease_expires_at,
       j.lease_expires_at < now() AS lease_expired
FROM pgq.jobs j
WHERE j.status = 'running';
COMMENT ON VIEW pgq.running_jobs IS
    'Jobs in flight: which worker holds what, for how long, and whether its lease has expired.';
DROP FUNCTION pgq.cancel(bigint);
DROP TRIGGER jobs_notify_cancel ON pgq.jobs;
DROP FUNCTION pgq.jobs_notify_cancel();
ALTER TABLE pgq.jobs DROP COLUMN progress;
