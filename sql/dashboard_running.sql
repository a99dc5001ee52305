-- dashboard_running: the running jobs, longest-running first, at most `limit`: which worker runs
-- what, since when, until when its lease holds, and the progress its handler reported. Reads
-- running jobs only (jobs_running_idx), as many as are in flight.
SELECT j.id, j.queue, j.kind, j.claimed_by, j.attempts, j.max_attempts, j.started_at,
       j.lease_expires_at, j.progress
FROM pgq.jobs j
WHERE j.status = 'running'
ORDER BY j.started_at, j.id
LIMIT %(limit)s
