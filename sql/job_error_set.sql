-- job_error_set: store why a running attempt is handed back as the job's last_error, so that
-- `pgq status`, `pgq jobs show` and the dashboard can say why the job waits. A worker runs it (once
-- per job and reason) just before it snoozes an attempt of a kind its app has no task for
-- (pgq/worker/runner.py): job_snooze.sql leaves last_error as it is. Fenced by the lease token
-- like every acknowledgement (pgq.error_set, revision 0011): an attempt that lost its lease changes
-- nothing. Returns the id.
SELECT e.id
FROM pgq.error_set(%(id)s::bigint, %(token)s::uuid, %(error)s::text) e
