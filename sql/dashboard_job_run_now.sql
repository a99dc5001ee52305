-- dashboard_job_run_now: make scheduled job `id` (queued, due later) due now, and wake the workers of
-- its queue (channel pgq, as an enqueue does). Only the due time changes: its attempts, priority
-- and place in the claim index (by run_at) follow. Returns the job, or no row when it is not
-- queued and due later (running, finished, waiting, or ready already).
WITH moved AS (
    UPDATE pgq.jobs j
    SET run_at = now()
    WHERE j.id = %(id)s::bigint AND j.status = 'queued' AND j.run_at > now()
    RETURNING j.*
)
SELECT m.*, pg_notify('pgq', CASE WHEN octet_length(m.queue) <= 1000 THEN m.queue ELSE '*' END) IS NULL AS woke
FROM moved m
