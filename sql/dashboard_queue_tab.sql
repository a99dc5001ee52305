-- dashboard_queue_tab: one state tab of the queue page (/queues/NAME): the jobs of queue `queue` in
-- state `tab`, at most `limit`, in the order that tab is read by; columns as dashboard_jobs.sql.
-- Each branch reads one partial index, filtered to the queue, so the cost of a tab follows the
-- queue's jobs in that state (its backlog, or its failed jobs), never the size of the table:
--   ready, scheduled: jobs_claim_idx (status 'queued'), ready ones in claim order (priority,
--                     due time, id), scheduled ones by due time;
--   retrying:         jobs_retrying_idx (queued again after a failed attempt), next due first;
--   running:          jobs_running_idx, longest running first;
--   waiting:          jobs_waiting_idx (waiting for parent jobs), oldest first;
--   failed:           jobs_failed_idx (queue, finished_at), newest first.
-- Only the branch whose `tab` matches runs: the others are cut off by their constant condition at
-- execution (a one-time filter), whatever plan is cached. Cancelled jobs have no index of their own:
-- dashboard_queue_cancelled.sql reads them.
SELECT j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM (
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'ready' AND j.status = 'queued' AND j.queue = %(queue)s::text AND j.run_at <= now()
     ORDER BY j.priority, j.run_at, j.id LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'scheduled' AND j.status = 'queued' AND j.queue = %(queue)s::text AND j.run_at > now()
     ORDER BY j.run_at, j.id LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'retrying' AND j.status = 'queued' AND j.last_error IS NOT NULL
       AND j.queue = %(queue)s::text
     ORDER BY j.run_at, j.id LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'running' AND j.status = 'running' AND j.queue = %(queue)s::text
     ORDER BY j.started_at, j.id LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'waiting' AND j.status = 'waiting' AND j.queue = %(queue)s::text
     ORDER BY j.id LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id FROM pgq.jobs j
     WHERE %(tab)s::text = 'failed' AND j.status = 'failed' AND j.queue = %(queue)s::text
     ORDER BY j.finished_at DESC, j.id DESC LIMIT %(limit)s)
) picked
JOIN LATERAL (SELECT * FROM pgq.jobs j WHERE j.id = picked.id) j ON true
