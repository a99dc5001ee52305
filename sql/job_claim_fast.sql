-- job_claim_fast: the claim of the common case in one statement and one round trip: a single queue,
-- and no concurrency or rate limit defined for any kind; nothing from a paused queue (see job_claim.sql).
-- Same order, locking and lease as job_claim, but a plan small enough to be cheap to make on every
-- call (job_claim's general plan costs more to plan than to run). When any limit exists it claims nothing, and the caller falls back to the exact
-- two-step claim (claim_limits_lock, then job_claim) for the slots still free.
WITH picked AS (
    SELECT j.id
    FROM pgq.jobs j
    WHERE j.status = 'queued'
      AND j.queue = %(queue)s
      AND j.run_at <= now()
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits)
      AND NOT EXISTS (SELECT 1 FROM pgq.rate_limits)
      -- A paused queue yields nothing (evaluated once: it does not depend on the row).
      AND NOT EXISTS (SELECT 1 FROM pgq.paused_queues p WHERE p.queue = %(queue)s)
    ORDER BY j.priority, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE pgq.jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        claimed_by = %(worker)s,
        started_at = now()
    -- id = ANY(ARRAY(...)) rather than a join: the planner then always updates through jobs_pkey,
    -- where a join with a large `limit` may pick a hash join over a scan of the whole table.
    WHERE j.id = ANY(ARRAY(SELECT p.id FROM picked p))
    -- Every column of pgq.jobs in table order (pgq.models.Job's field order), read as one tuple per
    -- row; the token and status as text, which the worker keeps as str anyway.
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.status::text, j.run_at, j.attempts, j.max_attempts,
              j.dedupe_key, j.lease_token::text, j.lease_expires_at, j.claimed_by, j.last_error, j.result,
              j.input_watermark, j.done_watermark, j.created_at, j.started_at, j.finished_at, j.progress
)
-- In claim order, sorted here rather than by each worker: the worker starts them in this order.
SELECT * FROM claimed c
ORDER BY c.priority, c.run_at, c.id
