-- job_fail_skip: job_fail (sql/job_fail.sql) for a worker whose rows another transaction may hold:
-- record failed attempts (a batch). Fenced like job_complete, and locks its rows like it:
-- in id order, SKIP LOCKED unless `wait`; a row skipped comes back with `busy` true (as read in this
-- statement's snapshot, unchanged): not lost, to be sent again.
-- A job with attempts left (and not failed as `final`) goes back to queued, due after `retry_in`
-- seconds, or, when that is NULL, after an exponential backoff with jitter: 2^attempts seconds
-- times a random factor in [0.75, 1.25), never under 1 s nor over one hour. A job that used
-- its last attempt is terminally failed, which also frees its dedupe key.
-- `progress`: as in job_complete.
WITH failing AS (
    SELECT f.id, f.token, f.error, f.retry_in, f.final, f.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[],
                %(retry_in)b::double precision[], %(finals)b::boolean[], %(progress)b::text[]::jsonb[])
         AS f(id, token, error, retry_in, final, progress)
),
held AS (
    -- Still ours in this statement's snapshot (read, no lock).
    SELECT j.id
    FROM pgq.jobs j JOIN failing f ON j.id = f.id AND j.lease_token = f.token
    WHERE j.id = ANY(%(ids)b::bigint[])
),
skipping AS (
    SELECT j.id
    FROM pgq.jobs j JOIN failing f ON j.id = f.id AND j.lease_token = f.token
    WHERE j.id = ANY(%(ids)b::bigint[]) AND NOT %(wait)b::boolean
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
waiting AS (
    SELECT j.id
    FROM pgq.jobs j JOIN failing f ON j.id = f.id AND j.lease_token = f.token
    WHERE j.id = ANY(%(ids)b::bigint[]) AND %(wait)b::boolean
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
),
locked AS (
    SELECT id FROM skipping UNION ALL SELECT id FROM waiting
),
busy AS (
    -- Rows of `held` that `locked` left out: grouped, not probed row by row (a probe of a CTE per
    -- row costs a batch of n jobs n x n comparisons, as its estimate is a guess).
    SELECT u.id
    FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
    GROUP BY u.id
    HAVING sum(u.n) > 0
),
failed AS (
UPDATE pgq.jobs j
SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                  THEN 'failed' ELSE 'queued' END::pgq.job_status,
    run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                  ELSE now() + make_interval(secs => coalesce(
                      f.retry_in,
                      greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
             END,
    last_error = f.error,
    progress = coalesce(f.progress, j.progress),
    lease_token = NULL,
    lease_expires_at = NULL,
    finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
-- The arrays again, cut down to the rows locked above, rather than a join with the CTEs: a
-- CTE scan's row estimate is a guess, and a nested loop over one costs a batch of n jobs n x n.
FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[],
                %(retry_in)b::double precision[], %(finals)b::boolean[], %(progress)b::text[]::jsonb[])
         AS u(id, token, error, retry_in, final, progress)
      WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
      ORDER BY u.id) f
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = f.id AND j.lease_token = f.token
RETURNING j.*
)
SELECT x.*, false AS busy FROM failed x
UNION ALL
-- Busy: still ours in the snapshot but locked by another transaction (the rare case: read again).
SELECT j.*, true AS busy
FROM pgq.jobs j
-- Waiting, a row of `held` not locked changed hands since the snapshot: lost, not busy.
WHERE NOT %(wait)b::boolean AND j.id = ANY(%(ids)b::bigint[])
  AND j.id = ANY(ARRAY(SELECT b.id FROM busy b))
