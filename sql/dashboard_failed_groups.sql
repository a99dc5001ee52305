-- dashboard_failed_groups: the dead-letter view of the jobs page's "failed" filter: jobs that failed for
-- good, grouped by kind and the first line of their error (its first 200 characters, as the bulk
-- actions' and the search's `error_line` filter takes it: a group's "retry all"), with how many
-- and when the first and the last of them failed; the biggest groups first, at most 50.
--
-- Bounded (issue #44): only the newest `scan` failed jobs are read, then filtered by `kind` (NULL:
-- all): `scan` heap reads. Of every queue (`queue` NULL): the highest ids, backwards through
-- jobs_failed_id_idx (revision 0029); of one queue: the latest finished_at, backwards through
-- jobs_failed_idx (queue, finished_at). Reading every failed job took 8.7 s at 10,000,000 finished jobs
-- (103,000 failed, one heap page each). Each row says how many were read (`scanned`): when that is
-- `scan`, older failed jobs were not grouped.
WITH newest AS MATERIALIZED (
    (SELECT j.kind, j.last_error, j.finished_at
     FROM pgq.jobs j
     WHERE %(queue)s::text IS NULL AND j.status = 'failed' AND j.id >= '-9223372036854775808'::bigint
     ORDER BY j.id DESC
     LIMIT %(scan)s::bigint)
    UNION ALL
    (SELECT j.kind, j.last_error, j.finished_at
     FROM pgq.jobs j
     WHERE j.status = 'failed' AND j.queue = %(queue)s::text
     ORDER BY j.finished_at DESC
     LIMIT %(scan)s::bigint)
)
SELECT j.kind, left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) AS error, count(*) AS jobs,
       min(j.finished_at) AS first_seen, max(j.finished_at) AS last_seen,
       (SELECT count(*) FROM newest) AS scanned
FROM newest j
WHERE %(kind)s::text IS NULL OR j.kind = %(kind)s::text
GROUP BY 1, 2
ORDER BY count(*) DESC, max(j.finished_at) DESC, 1, 2
LIMIT 50
