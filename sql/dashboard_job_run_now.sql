-- dashboard_job_run_now: make scheduled job `id` (queued, due later) due now, and wake the workers of
-- its queue (channel pgq, as an enqueue does). Only the due time changes: its attempts, priority
-- and place in the claim index (by run_at) follow. Returns the job, or no row when it is not
-- queued and due later (running, finished, waiting, or ready already). A job made due is recorded in
-- pgq.job_audit (action run_now) with `actor` and the role.
WITH moved AS (
    UPDATE pgq.jobs j
    SET run_at = now()
    WHERE j.id = %(id)s::bigint AND j.status = 'queued' AND j.run_at > now()
    RETURNING j.*
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, job_ids)
    SELECT 'run_now', %(actor)s::text, ARRAY[m.id] FROM moved m
)
SELECT m.*, pg_notify('pgq', CASE WHEN octet_length(m.queue) <= 1000 THEN m.queue ELSE '*' END) IS NULL AS woke
FROM moved m
