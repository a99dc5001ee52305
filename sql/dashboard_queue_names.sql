-- dashboard_queue_names: the names of the queues that hold queued jobs or are paused, for the job
-- search's queue suggestions. A loose index scan over jobs_claim_idx: one probe per distinct queue,
-- whatever the backlog (job_next_run_at.sql does the same).
WITH RECURSIVE every_queue AS (
    (SELECT j.queue FROM pgq.jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue > e.queue ORDER BY j.queue LIMIT 1)
    FROM every_queue e
    WHERE e.queue IS NOT NULL
)
SELECT e.queue FROM every_queue e WHERE e.queue IS NOT NULL
UNION
SELECT p.queue FROM pgq.paused_queues p
ORDER BY 1
