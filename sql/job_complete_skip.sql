-- job_complete_skip: job_complete (sql/job_complete.sql) for a worker whose rows another transaction may hold:
-- finish a batch of attempts successfully; one statement for any number of jobs.
-- Fenced: a row changes only while it is still running under the presented lease token; the
-- caller compares the returned ids with the ones it sent to find lost leases.
-- Row locks: taken first, in id order, SKIP LOCKED unless `wait` (see job_heartbeat.sql: a
-- producer's open transaction, or a claimer for a moment, may hold a running job's row; one busy
-- row must not hold up the others). Rows still under the presented token in this statement's
-- snapshot but skipped come back with a NULL status (`busy`): not lost, to be sent again.
-- Watermarks: `watermarks` holds, per job, the input watermark the run processed (NULL: none).
-- If a newer watermark arrived while the job ran (input_watermark above the processed one), the
-- job is not finished: it goes back to queued for one more run (a "dirty" re-run), with a fresh
-- series of attempts. Otherwise it succeeds, and the key's processed watermark advances.
-- `progress`: per job, progress its handler reported that no heartbeat stored yet (NULL: none; the
-- whole array NULL when no job of the batch has any).
WITH done AS (
    SELECT d.id, d.token, d.result, d.watermark, d.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[]::jsonb[],
                %(watermarks)b::bigint[], %(progress)b::text[]::jsonb[])
         AS d(id, token, result, watermark, progress)
),
held AS (
    -- Still ours in this statement's snapshot (read, no lock).
    SELECT j.id
    FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
    WHERE j.id = ANY(%(ids)b::bigint[])
),
skipping AS (
    SELECT j.id
    FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
    WHERE j.id = ANY(%(ids)b::bigint[]) AND NOT %(wait)b::boolean
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
waiting AS (
    SELECT j.id
    FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
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
finished AS (
    UPDATE pgq.jobs j
    SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                      THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
        result = d.result,
        progress = coalesce(d.progress, j.progress),
        done_watermark = greatest(j.done_watermark, d.watermark),
        lease_token = NULL,
        lease_expires_at = NULL,
        attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                        THEN 0 ELSE j.attempts END,
        run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                      THEN now() ELSE j.run_at END,
        finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                           THEN NULL ELSE now() END
    -- The arrays again, cut down to the rows locked above, rather than a join with the CTEs: a
    -- CTE scan's row estimate is a guess, and a nested loop over one costs a batch of n jobs n x n.
    FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[]::jsonb[],
                    %(watermarks)b::bigint[], %(progress)b::text[]::jsonb[])
             AS u(id, token, result, watermark, progress)
          WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
          ORDER BY u.id) d
    -- No `status = 'running'` test: a token is set exactly while the job runs (CHECK
    -- jobs_lease_iff_running), and that test would tempt the planner into scanning jobs_running_idx,
    -- whose entries for rows finished since the last vacuum make every acknowledgement slower than
    -- the one before. `id = ANY(ids)` makes jobs_pkey the way in, whatever the statistics say.
    -- The row was locked above: this reads its newest version (input_watermark included).
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = d.id AND j.lease_token = d.token
    RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
),
marks AS (
    -- Remember, per key, the highest watermark processed, beyond the life of this job row.
    INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
    SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
    FROM finished f
    WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
    ON CONFLICT (queue, dedupe_key) DO UPDATE
    SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
    WHERE w.done_watermark < excluded.done_watermark
),
wake AS (
    -- Dirty re-runs are ready at once: wake the workers of their queues.
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
    FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
)
SELECT f.id, f.status::text AS status, (SELECT w.n FROM wake w) AS woke
FROM finished f
UNION ALL
SELECT b.id, NULL, NULL FROM busy b
-- Waiting, a row of `held` not locked changed hands since the snapshot: lost, not busy.
WHERE NOT %(wait)b::boolean
