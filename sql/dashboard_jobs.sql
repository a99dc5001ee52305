-- dashboard_jobs: one window of the dashboard's job search: the jobs with `low` <= id < `high` that
-- match every filter given (status, queue, kind, `text` found in the kind, the dedupe key or the last error,
-- ignoring case, and `payload`, JSON the payload contains (jsonb @>); NULL: no filter), newest
-- (highest id) first, at most `limit`. `error_line`: the first line of the last error (its first 200
-- characters, '' without error text) equals this, one dead-letter group of
-- sql/dashboard_failed_groups.sql. The payload test needs no index: like the others it runs on
-- the window's rows only (no write pays for it; see docs/dashboard.md for its cost).
--
-- Why windows of ids: pgq.jobs has no index on kind, and none that serves "newest first" for a queue
-- or a text, and adding them would cost every enqueue, claim and acknowledgement an index entry
-- more. So the search reads jobs_pkey backwards over a bounded range of ids (`high` - `low`, e.g.
-- 50,000) and filters there: each statement reads at most that many rows, whatever the filters and
-- however big the table. The caller (pgq.web.queries.find_jobs) moves the window down until the page
-- is full, the table's lowest id is passed, or its time budget is spent, and hands out the id it
-- stopped at as the cursor of the next page: keyset pagination, so a job is listed once however
-- many jobs are enqueued meanwhile. The error's first 300 characters are enough for a list.
SELECT j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM pgq.jobs j
WHERE j.id < %(high)s::bigint
  AND j.id >= %(low)s::bigint
  AND (%(status)s::pgq.job_status IS NULL OR j.status = %(status)s::pgq.job_status)
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
