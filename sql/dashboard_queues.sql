-- dashboard_queues: per queue, what the overview shows of its waiting, queued and running jobs:
-- waiting (for parent jobs), ready, scheduled, running, expired leases (pgq.queue_backlog), retrying
-- (queued again after a failed attempt; among them, unknown_kind: handed back by a worker whose app
-- has no task of their kind, see sql/queue_unknown_kinds.sql), the distinct workers running its jobs, the age of its
-- oldest ready job, when its next scheduled job is due, and whether it is paused (since when, by whom
-- and through which database role).
-- Paused queues without jobs are listed too, and so are queues holding only waiting jobs.
--
-- Reads waiting, queued and running jobs only, never finished ones: pgq.queue_backlog counts through
-- the partial indexes jobs_claim_idx (index-only) and jobs_running_idx, waiting through
-- jobs_waiting_idx, retrying through jobs_retrying_idx, workers through jobs_running_idx. Its cost
-- follows the backlog (100,000 queued jobs: about 20 ms), not the size of the table. Finished jobs
-- come from dashboard_finished.sql.
WITH waiting AS (
    SELECT j.queue, count(*) AS waiting
    FROM pgq.jobs j
    WHERE j.status = 'waiting'
    GROUP BY j.queue
),
retrying AS (
    SELECT j.queue, count(*) AS retrying,
           count(*) FILTER (WHERE j.last_error LIKE 'no worker of queue %% knows kind %%') AS unknown_kind
    FROM pgq.jobs j
    WHERE j.status = 'queued' AND j.last_error IS NOT NULL
    GROUP BY j.queue
),
busy AS (
    SELECT j.queue, count(DISTINCT j.claimed_by) AS workers
    FROM pgq.jobs j
    WHERE j.status = 'running'
    GROUP BY j.queue
)
SELECT coalesce(b.queue, p.queue, t.queue) AS queue,
       coalesce(t.waiting, 0) AS waiting,
       coalesce(b.ready, 0) AS ready,
       coalesce(b.scheduled, 0) AS scheduled,
       coalesce(b.running, 0) AS running,
       coalesce(b.expired_leases, 0) AS expired_leases,
       coalesce(r.retrying, 0) AS retrying,
       coalesce(r.unknown_kind, 0) AS unknown_kind,
       coalesce(w.workers, 0) AS workers,
       extract(epoch FROM b.oldest_ready_age)::double precision AS oldest_ready_age_s,
       b.next_run_at,
       p.queue IS NOT NULL AS paused,
       p.paused_at,
       p.paused_by,
       p.paused_role
FROM pgq.queue_backlog b
FULL JOIN pgq.paused_queues p ON p.queue = b.queue
FULL JOIN waiting t ON t.queue = coalesce(b.queue, p.queue)
LEFT JOIN retrying r ON r.queue = b.queue
LEFT JOIN busy w ON w.queue = b.queue
ORDER BY 1
