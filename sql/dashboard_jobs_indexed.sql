-- dashboard_jobs_indexed: the job search when its status is one with a partial index of its own
-- (waiting: jobs_waiting_idx, queued: jobs_claim_idx, running: jobs_running_idx, failed:
-- jobs_failed_idx): every job of that status with an id below `high` that matches the other filters
-- (as in dashboard_jobs.sql), newest first, at most `limit`, in one statement and complete: no id
-- window, no time budget, no partial page. Its cost follows the number of jobs in that status (the
-- backlog, or the failed jobs kept), never the table's size. Each branch names its status as a
-- constant, so that its partial index applies in any plan, cached ones included; only the branch of
-- `status` runs (a one-time filter).
WITH picked AS (
    (SELECT j.id FROM pgq.jobs j WHERE %(status)s::text = 'waiting' AND j.status = 'waiting' AND j.id < %(high)s::bigint)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j WHERE %(status)s::text = 'queued' AND j.status = 'queued' AND j.id < %(high)s::bigint)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j WHERE %(status)s::text = 'running' AND j.status = 'running' AND j.id < %(high)s::bigint)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j WHERE %(status)s::text = 'failed' AND j.status = 'failed' AND j.id < %(high)s::bigint)
)
SELECT j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM picked p
JOIN pgq.jobs j ON j.id = p.id
WHERE j.status::text = %(status)s::text
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
