-- dashboard_failed_groups: the dead-letter view of the jobs page's "failed" filter: jobs that failed for
-- good, grouped by kind and the first line of their error (its first 200 characters, as the bulk
-- actions' and the search's `error_line` filter takes it: a group's "retry all"), with how many
-- and when the first and the last of them failed; the biggest groups first, at most 50.
--
-- Bounded (issue #44): only the newest `scan` failed jobs of `queue` (NULL: of every queue) are
-- read, then filtered by `kind` (NULL: all). Reading every failed job took 8.7 s at 10,000,000
-- finished jobs (103,000 failed, one heap page each). The queues come from a loose index scan of
-- jobs_failed_idx (queue, finished_at); the finished_at of the `scan`-th newest failed job, from
-- each queue's newest `scan` entries of that index (index-only); then the rows of the failed jobs
-- since it, through the same index: `scan` heap reads. Each row says how many were grouped
-- (`scanned`): when that is `scan`, older failed jobs were not.
WITH RECURSIVE queues AS (
    (SELECT j.queue FROM pgq.jobs j
     WHERE j.status = 'failed' AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT n.queue
    FROM queues p
    CROSS JOIN LATERAL (SELECT j.queue FROM pgq.jobs j
                        WHERE j.status = 'failed' AND j.queue > p.queue
                          AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
                        ORDER BY j.queue LIMIT 1) n
),
cutoff AS (  -- the finished_at of the `scan`-th newest failed job: index-only, no heap page read
    SELECT min(t.finished_at) AS at, count(*) AS scanned
    FROM (SELECT f.finished_at
          FROM queues q
          CROSS JOIN LATERAL (SELECT j.finished_at FROM pgq.jobs j
                              WHERE j.status = 'failed' AND j.queue = q.queue
                              ORDER BY j.finished_at DESC LIMIT %(scan)s::bigint) f
          ORDER BY f.finished_at DESC
          LIMIT %(scan)s::bigint) t
),
newest AS MATERIALIZED (  -- then those jobs' rows (ties at the cutoff included)
    SELECT j.kind, j.last_error, j.finished_at
    FROM queues q
    CROSS JOIN cutoff c
    JOIN pgq.jobs j ON j.status = 'failed' AND j.queue = q.queue AND j.finished_at >= c.at
)
SELECT j.kind, left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) AS error, count(*) AS jobs,
       min(j.finished_at) AS first_seen, max(j.finished_at) AS last_seen,
       (SELECT c.scanned FROM cutoff c) AS scanned
FROM newest j
WHERE %(kind)s::text IS NULL OR j.kind = %(kind)s::text
GROUP BY 1, 2
ORDER BY count(*) DESC, max(j.finished_at) DESC, 1, 2
LIMIT 50
