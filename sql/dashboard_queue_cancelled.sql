-- dashboard_queue_cancelled: the queue page's "cancelled" tab and count: among the newest `scan`
-- finished jobs (a backward range scan of jobs_finished_idx that stops after `scan` rows, as in
-- dashboard_finished.sql), those of queue `queue` that were cancelled: how many (`jobs`, a window
-- count over them all) and the newest `limit` of them. `scanned` is how many finished jobs were
-- read: when it equals `scan`, older finished jobs were not looked at and the count is partial
-- (the page and the API say so). No index serves cancelled jobs alone, and none is added: every
-- finish would pay for it.
WITH recent AS (
    SELECT j.id, j.queue, j.status, j.finished_at
    FROM pgq.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled')
    ORDER BY j.finished_at DESC
    LIMIT %(scan)s
),
mine AS (
    SELECT r.id, r.finished_at, count(*) OVER () AS jobs
    FROM recent r
    WHERE r.queue = %(queue)s::text AND r.status = 'cancelled'
)
SELECT (SELECT count(*) FROM recent) AS scanned,
       (SELECT max(m.jobs) FROM mine m) AS jobs,
       j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM (SELECT 1) one
LEFT JOIN LATERAL (SELECT m.id FROM mine m ORDER BY m.finished_at DESC, m.id DESC LIMIT %(limit)s) picked ON true
LEFT JOIN pgq.jobs j ON j.id = picked.id
