-- job_fail: record failed attempts (a batch). Fenced like job_complete.
-- A job with attempts left (and not failed as `final`) goes back to queued, due after `retry_in`
-- seconds, or, when that is NULL, after an exponential backoff with jitter: 2^attempts seconds
-- times a random factor in [0.75, 1.25), never under 1 s nor over one hour. A job that used
-- its last attempt is terminally failed, which also frees its dedupe key.
-- `progress`: as in job_complete.
-- `lock_timeout`: the worker's own acknowledgements (each its own transaction) wait at most this
-- long for a row lock that another transaction holds (a producer's, an operator's), then fail with
-- lock_not_available and are sent again through job_fail_skip.sql, which skips held rows; NULL: wait as
-- long as it takes (a caller's own use). Set for this statement's transaction only.
WITH guard AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s::text, true) AS was_set
    WHERE %(lock_timeout)s::text IS NOT NULL
),
failing AS (
    SELECT f.id, f.token, f.error, f.retry_in, f.final, f.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[],
                %(retry_in)b::double precision[], %(finals)b::boolean[], %(progress)b::text[]::jsonb[])
         AS f(id, token, error, retry_in, final, progress)
    -- In id order: with jobs_pkey's scan (which also visits `ids` in order), every plan then locks
    -- the rows in id order, the one order of every statement that locks several jobs.
    ORDER BY f.id
)
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
FROM failing f
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = f.id AND j.lease_token = f.token
  AND (SELECT count(*) FROM guard) >= 0
RETURNING j.*
