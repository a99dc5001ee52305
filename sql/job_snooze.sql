-- job_snooze: put running attempts back to queued, due `delay_s` seconds from now, without spending
-- an attempt (the claim's increment is given back). Used by jobs that poll an external system, and
-- by a worker handing unfinished jobs back at shutdown (delay 0). Fenced like job_complete.
-- `progress`: as in job_complete.
WITH snoozed AS (
UPDATE pgq.jobs j
SET status = 'queued',
    run_at = now() + make_interval(secs => s.delay_s),
    attempts = greatest(j.attempts - 1, 0),
    lease_token = NULL,
    lease_expires_at = NULL,
    progress = coalesce(s.progress, j.progress)
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
            %(progress)b::text[]::jsonb[]) AS s(id, token, delay_s, progress)
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = s.id AND j.lease_token = s.token
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
