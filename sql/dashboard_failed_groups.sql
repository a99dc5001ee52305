-- dashboard_failed_groups: the dead-letter view of the jobs page's "failed" filter: jobs that failed for
-- good, grouped by kind and the first line of their error (its first 200 characters, as the bulk
-- actions' and the search's `error_line` filter takes it: a group's "retry all"), with how many
-- and when the first and the last of them failed; the biggest groups first, at most 50. Only failed
-- jobs are read (jobs_failed_idx), of `queue` and `kind` when given (NULL: all).
SELECT j.kind, left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) AS error, count(*) AS jobs,
       min(j.finished_at) AS first_seen, max(j.finished_at) AS last_seen
FROM pgq.jobs j
WHERE j.status = 'failed'
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
GROUP BY 1, 2
ORDER BY count(*) DESC, max(j.finished_at) DESC, 1, 2
LIMIT 50
