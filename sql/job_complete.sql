-- job_complete: finish a batch of attempts successfully; one statement for any number of jobs.
-- Fenced: a row changes only while it is still running under the presented lease token; the
-- caller compares the returned ids with the ones it sent to find lost leases.
-- Watermarks: `watermarks` holds, per job, the input watermark the run processed (NULL: none).
-- If a newer watermark arrived while the job ran (input_watermark above the processed one), the
-- job is not finished: it goes back to queued for one more run (a "dirty" re-run), with a fresh
-- series of attempts. Otherwise it succeeds, and the key's processed watermark advances.
-- `progress`: per job, progress its handler reported that no heartbeat stored yet (NULL: none; the
-- whole array NULL when no job of the batch has any).
-- `lock_timeout`: the worker's own acknowledgements (each its own transaction) wait at most this
-- long for a row lock that another transaction holds (a producer's, an operator's), then fail with
-- lock_not_available and are sent again through job_complete_skip.sql, which skips held rows; NULL: wait as
-- long as it takes (a caller's own use). Set for this statement's transaction only.
WITH guard AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s::text, true) AS was_set
    WHERE %(lock_timeout)s::text IS NOT NULL
),
done AS (
    SELECT d.id, d.token, d.result, d.watermark, d.progress
    FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[]::jsonb[],
                %(watermarks)b::bigint[], %(progress)b::text[]::jsonb[])
         AS d(id, token, result, watermark, progress)
    -- In id order: with jobs_pkey's scan (which also visits `ids` in order), every plan then locks
    -- the rows in id order, the one order of every statement that locks several jobs.
    ORDER BY d.id
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
    FROM done d
    -- No `status = 'running'` test: a token is set exactly while the job runs (CHECK
    -- jobs_lease_iff_running), and that test would tempt the planner into scanning jobs_running_idx,
    -- whose entries for rows finished since the last vacuum make every acknowledgement slower than
    -- the one before. `id = ANY(ids)` makes jobs_pkey the way in, whatever the statistics say.
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = d.id AND j.lease_token = d.token
  AND (SELECT count(*) FROM guard) >= 0
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
