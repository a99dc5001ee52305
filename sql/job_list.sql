-- job_list: jobs filtered by status, queue and kind (each optional), newest first. `before_id` pages
-- backwards through the table (pass the smallest id of the previous page). The lease token is never
-- read (see job_get.sql).
SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.status, j.run_at, j.attempts, j.max_attempts, j.dedupe_key,
       NULL::uuid AS lease_token, j.lease_expires_at, j.claimed_by, j.last_error, j.result, j.input_watermark,
       j.done_watermark, j.created_at, j.started_at, j.finished_at, j.progress, j.group_key, j.sequence_key
FROM pgq.jobs j
WHERE (%(status)s::pgq.job_status IS NULL OR j.status = %(status)s::pgq.job_status)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
ORDER BY j.id DESC
LIMIT %(limit)s
