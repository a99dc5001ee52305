-- job_error_set: store why a running attempt is handed back as the job's last_error, so that
-- `pgq status`, `pgq jobs show` and the dashboard can say why the job waits. A worker runs it (once
-- per job and reason) just before it snoozes an attempt of a kind its app has no task for
-- (pgq/worker/runner.py): job_snooze.sql leaves last_error as it is. Fenced by the lease token
-- like every acknowledgement: an attempt that lost its lease changes nothing. Returns the id.
UPDATE pgq.jobs j
SET last_error = %(error)s::text
WHERE j.id = %(id)s::bigint AND j.lease_token = %(token)s::uuid
RETURNING j.id
