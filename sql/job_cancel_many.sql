-- job_cancel_many: cancel the waiting, queued or running jobs among `ids` (one batch of a bulk
-- cancel), as pgq.cancel does one: a running job's lease is cleared and its worker notified (trigger);
-- the operation then sends job_after_finish for the batch (dependents, waiters). Rows are locked in
-- id order; a row another transaction holds is waited for. One pgq.job_audit row lists the jobs cancelled. Returns how many.
WITH picked AS (
    SELECT j.id FROM pgq.jobs j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('waiting', 'queued', 'running')
    ORDER BY j.id
    FOR NO KEY UPDATE OF j  -- the UPDATE's own lock: a producer's FOR KEY SHARE (a new child) does not stop it
),
cancelled AS (
    UPDATE pgq.jobs j
    SET status = 'cancelled', lease_token = NULL, lease_expires_at = NULL, finished_at = now()
    FROM picked p
    WHERE j.id = p.id
    RETURNING j.id
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, filters, job_ids)
    SELECT 'cancel', %(actor)s::text, %(filters)s::jsonb, array_agg(c.id ORDER BY c.id)
    FROM cancelled c
    HAVING count(*) > 0
)
SELECT count(*)::integer AS changed FROM cancelled
