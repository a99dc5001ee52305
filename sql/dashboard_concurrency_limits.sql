-- dashboard_concurrency_limits: each concurrency limit (pgq.concurrency_limits) with the number of
-- jobs of its kind running now, counted as the claim counts them (jobs_running_idx).
SELECT l.kind, l.max_running, l.updated_at,
       (SELECT count(*) FROM pgq.jobs j WHERE j.status = 'running' AND j.kind = l.kind) AS running
FROM pgq.concurrency_limits l
ORDER BY l.kind
