-- dashboard_jobs_failed: the job search's indexed read (as sql/dashboard_jobs_indexed.sql) when its
-- status is `failed`: every failed job with an id below `high` that matches the other filters, newest
-- first, at most `limit`, complete, read backwards through jobs_failed_id_idx (revision 0029) and
-- stopping at the page. Through jobs_failed_idx (queue, finished_at) every failed job was read and
-- sorted by id: 4.4 s at 10,000,000 finished jobs (103,000 failed) behind 100,000 queued ones.
SELECT j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM pgq.jobs j
WHERE j.status = 'failed' AND j.id >= '-9223372036854775808'::bigint AND j.id < %(high)s::bigint
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.kind), lower(%(text)s::text)) > 0
       OR strpos(lower(j.dedupe_key), lower(%(text)s::text)) > 0
       OR strpos(lower(j.last_error), lower(%(text)s::text)) > 0)
  AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
  AND (%(error_line)s::text IS NULL
       OR left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) = %(error_line)s::text)
ORDER BY j.id DESC
LIMIT %(limit)s
