-- pgq schema, revision 0004: control of running jobs. A job's progress, reported by its handler; a
-- notification to the worker running a job the moment it is cancelled; pgq.cancel() for DBAs.

-- The last progress value a handler reported (pgq.set_progress), stored with the worker's next
-- heartbeat or with the attempt's acknowledgement. Kept across attempts, so a retried handler can
-- read how far the last one got (current_job().progress). Nullable without a default: adding it
-- rewrites nothing, and the claim's hot path never writes it.
ALTER TABLE pgq.jobs ADD COLUMN progress jsonb;
COMMENT ON COLUMN pgq.jobs.progress IS
    'Last progress the job''s handler reported (any JSON value), kept across attempts; NULL: none.';

-- A running job that is cancelled tells its worker at once: the notification is sent when the
-- cancelling transaction commits, on channel pgq_cancel, with payload '<id>:<lease token>' (the
-- token names the attempt, so a worker never interrupts a later attempt of the same job). A trigger
-- rather than the cancel statement, so that every way to cancel notifies: Queue.cancel,
-- `pgq jobs cancel`, pgq.cancel() and a DBA's own UPDATE. Its WHEN clause is evaluated without a
-- function call, so claims, heartbeats and acknowledgements (which never cancel) never run it.
-- pgq:function jobs_notify_cancel

CREATE TRIGGER jobs_notify_cancel
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'cancelled')
    EXECUTE FUNCTION pgq.jobs_notify_cancel();

-- The SQL API of cancel, for DBAs and other services (sql/job_cancel.sql runs it too):
--   SELECT id, status FROM pgq.cancel(42);
-- Cancels a queued or running job and returns it; returns no row when the job does not exist or has
-- finished already. A running job's lease is cleared, so its worker's completion is refused, and
-- its worker is told to stop the handler (trigger above). Runs with the caller's rights: the guard
-- of revision 0002 lets only administrators cancel.
-- pgq:function cancel

-- running_jobs gains the progress each job reported (columns may only be added at the end).
CREATE OR REPLACE VIEW pgq.running_jobs AS
SELECT j.id, j.queue, j.kind, j.claimed_by, j.attempts, j.started_at,
       now() - j.started_at AS running_for, j.lease_expires_at,
       j.lease_expires_at < now() AS lease_expired,
       j.progress
FROM pgq.jobs j
WHERE j.status = 'running';
COMMENT ON VIEW pgq.running_jobs IS
    'Jobs in flight: which worker holds what, for how long, whether its lease has expired, and the '
    'progress its handler last reported.';
