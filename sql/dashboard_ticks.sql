-- dashboard_ticks: the jobs of given periodic ticks: for each (queue, dedupe key) pair of the arrays,
-- in their order (`ord`), the newest job holding that key, in any status; no row for a tick that has
-- no job. A schedule's tick is enqueued with dedupe key 'periodic:<name>:<epoch seconds>' (see
-- pgq.tasks.Periodic), so the dashboard computes the keys of a schedule's last ticks and looks them
-- up here: one probe of jobs_dedupe_key_idx (queue, dedupe_key) per tick.
SELECT DISTINCT ON (t.ord) t.ord, j.id, j.status::text AS status, j.created_at, j.finished_at
FROM unnest(%(queues)s::text[], %(keys)s::text[]) WITH ORDINALITY AS t(queue, dedupe_key, ord)
JOIN pgq.jobs j ON j.queue = t.queue AND j.dedupe_key = t.dedupe_key
ORDER BY t.ord, j.id DESC
