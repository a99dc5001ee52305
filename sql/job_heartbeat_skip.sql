-- job_heartbeat_skip: job_heartbeat (sql/job_heartbeat.sql) for a worker whose rows another transaction may hold:
-- renew the leases of many running attempts in one statement (a worker sends one
-- per interval for all its jobs in flight), and store the progress their handlers reported since
-- the last one (`progress`: one JSON text per job, NULL to leave it; the whole array NULL when no
-- handler reported any). Fenced: only rows still running under the presented token are renewed.
--
-- Never waits on another transaction's row lock unless asked (`wait`): a producer's open transaction
-- holds the row of a job it named in `depends_on`, in a watermark enqueue or in pgq.mark_awaited
-- until it commits, and a claimer may hold a running row for a moment. Waiting there would hold up
-- the renewal of every other lease in the batch (and a watchdog cutting the statement would lose
-- them all). So the rows are locked first, in id order (one global order: no deadlock with
-- statements that lock the same rows in id order), SKIP LOCKED, and only those are renewed. Rows
-- of the batch still under the presented token in this statement's snapshot but skipped come back
-- as `busy` (NULL lease_expires_at): not lost, just not renewable now. The caller renews those with
-- `wait` = true, which waits for each row's lock in id order; meanwhile the waiter holds the row's
-- tuple lock, so job_rescue (SKIP LOCKED) leaves the row alone, and when the producer commits, the
-- renewal gets the row first. A waited renewal runs its lease from the clock when it got the row
-- (clock_timestamp()), not from when the statement began (now()).
-- Ids missing from the result lost their lease (cancelled, rescued, finished elsewhere).
WITH sent AS (
    SELECT h.id, h.token, h.lease_s, h.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
                %(progress)b::text[]::jsonb[])
         AS h(id, token, lease_s, progress)
),
held AS (
    -- Still ours in this statement's snapshot (read, no lock). Matched by id and token only, never
    -- `status = 'running'`: see job_complete.sql.
    SELECT j.id
    FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
    WHERE j.id = ANY(%(ids)b::bigint[])
),
skipping AS (
    SELECT j.id
    FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
    WHERE j.id = ANY(%(ids)b::bigint[]) AND NOT %(wait)b::boolean
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
waiting AS (
    SELECT j.id
    FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
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
renewed AS (
    UPDATE pgq.jobs j
    SET lease_expires_at = CASE WHEN %(wait)b::boolean THEN clock_timestamp() ELSE now() END
                           + make_interval(secs => h.lease_s),
        progress = coalesce(h.progress, j.progress)
    -- The arrays again, cut down to the rows locked above, rather than a join with the CTEs: a
    -- CTE scan's row estimate is a guess, and a nested loop over one costs a batch of n jobs n x n.
    FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
                    %(progress)b::text[]::jsonb[])
             AS u(id, token, lease_s, progress)
          WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
          ORDER BY u.id) h
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.lease_expires_at
)
SELECT r.id, r.lease_expires_at FROM renewed r
UNION ALL
SELECT b.id, NULL FROM busy b
-- Waiting, a row of `held` not locked changed hands since the snapshot: lost, not busy.
WHERE NOT %(wait)b::boolean
