-- job_list: jobs filtered by status, queue and kind (each optional), newest first. `before_id` pages
-- backwards through the table (pass the smallest id of the previous page).
SELECT j.*
FROM pgq.jobs j
WHERE (%(status)s::pgq.job_status IS NULL OR j.status = %(status)s::pgq.job_status)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
ORDER BY j.id DESC
LIMIT %(limit)s
