-- job_claim_fast: the claim of the common case in one statement and one round trip: a single queue,
-- and no concurrency limit defined for any kind. Same order, locking and lease as job_claim, but a
-- plan small enough to be cheap to make on every call (job_claim's general plan costs more to plan
-- than to run). When any limit exists it claims nothing, and the caller falls back to the exact
-- two-step claim (concurrency_limit_lock, then job_claim) for the slots still free.
WITH picked AS (
    SELECT j.id
    FROM pgq.jobs j
    WHERE j.status = 'queued'
      AND j.queue = %(queue)s
      AND j.run_at <= now()
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits)
    ORDER BY j.priority, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgq.jobs j
SET status = 'running',
    attempts = j.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => %(lease_s)s),
    claimed_by = %(worker)s,
    started_at = now()
FROM picked p
WHERE j.id = p.id
RETURNING j.*
