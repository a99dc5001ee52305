-- job_snooze_skip: job_snooze (sql/job_snooze.sql) for a worker whose rows another transaction may hold:
-- put running attempts back to queued, due `delay_s` seconds from now, without spending
-- an attempt (the claim's increment is given back). Used by jobs that poll an external system, and
-- by a worker handing unfinished jobs back at shutdown (delay 0). Fenced like job_complete, and
-- locks its rows like it: in id order, SKIP LOCKED unless `wait`; a row skipped comes back with
-- `busy` true (as read in this statement's snapshot, unchanged): not lost, to be sent again.
-- `progress`: as in job_complete.
WITH sent AS (
    SELECT s.id, s.token, s.delay_s, s.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
                %(progress)b::text[]::jsonb[]) AS s(id, token, delay_s, progress)
),
held AS (
    -- Still ours in this statement's snapshot (read, no lock).
    SELECT j.id
    FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
    WHERE j.id = ANY(%(ids)b::bigint[])
),
skipping AS (
    SELECT j.id
    FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
    WHERE j.id = ANY(%(ids)b::bigint[]) AND NOT %(wait)b::boolean
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
waiting AS (
    SELECT j.id
    FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
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
snoozed AS (
UPDATE pgq.jobs j
SET status = 'queued',
    run_at = now() + make_interval(secs => s.delay_s),
    attempts = greatest(j.attempts - 1, 0),
    lease_token = NULL,
    lease_expires_at = NULL,
    progress = coalesce(s.progress, j.progress)
-- The arrays again, cut down to the rows locked above, rather than a join with the CTEs: a
-- CTE scan's row estimate is a guess, and a nested loop over one costs a batch of n jobs n x n.
FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
                %(progress)b::text[]::jsonb[]) AS u(id, token, delay_s, progress)
      WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
      ORDER BY u.id) s
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
SELECT z.*, (SELECT w.n FROM wake w) AS woke, false AS busy
FROM snoozed z
UNION ALL
-- Busy: still ours in the snapshot but locked by another transaction (the rare case: read again).
SELECT j.*, NULL, true AS busy
FROM pgq.jobs j
-- Waiting, a row of `held` not locked changed hands since the snapshot: lost, not busy.
WHERE NOT %(wait)b::boolean AND j.id = ANY(%(ids)b::bigint[])
  AND j.id = ANY(ARRAY(SELECT b.id FROM busy b))
