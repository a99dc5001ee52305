-- job_snooze: put running attempts back to queued, due `delay_s` seconds from now, without spending
-- an attempt (the claim's increment is given back). Used by jobs that poll an external system, and
-- by a worker handing unfinished jobs back at shutdown (delay 0). Fenced like job_complete.
-- `progress`: as in job_complete.
-- `lock_timeout`: the worker's own acknowledgements (each its own transaction) wait at most this
-- long for a row lock that another transaction holds (a producer's, an operator's), then fail with
-- lock_not_available and are sent again through job_snooze_skip.sql, which skips held rows; NULL: wait as
-- long as it takes (a caller's own use). Set for this statement's transaction only.
WITH guard AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s::text, true) AS was_set
    WHERE %(lock_timeout)s::text IS NOT NULL
),
snoozed AS (
UPDATE pgq.jobs j
SET status = 'queued',
    run_at = now() + make_interval(secs => s.delay_s),
    attempts = greatest(j.attempts - 1, 0),
    lease_token = NULL,
    lease_expires_at = NULL,
    progress = coalesce(s.progress, j.progress)
FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
                          %(progress)b::text[]::jsonb[]) AS u(id, token, delay_s, progress)
      -- In id order: with jobs_pkey's scan (which also visits `ids` in order), every plan then locks
      -- the rows in id order, the one order of every statement that locks several jobs.
      ORDER BY u.id) s
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = s.id AND j.lease_token = s.token
  AND (SELECT count(*) FROM guard) >= 0
RETURNING j.*
),
wake AS (
    -- Jobs handed back due now (a worker shutting down) should not wait for the next poll of the
    -- other workers.
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
    FROM (SELECT DISTINCT z.queue FROM snoozed z WHERE z.run_at <= now()) q
)
SELECT z.*, (SELECT w.n FROM wake w) AS woke
FROM snoozed z
