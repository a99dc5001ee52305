-- job_cancel: cancel a queued or running job. A running job's lease is cleared, so its worker's
-- completion is refused (LeaseLost) and the cancellation stands. Frees the dedupe key.
UPDATE pgq.jobs j
SET status = 'cancelled',
    lease_token = NULL,
    lease_expires_at = NULL,
    finished_at = now()
WHERE j.id = %(id)s AND j.status IN ('queued', 'running')
RETURNING j.*
