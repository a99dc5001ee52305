-- dashboard_queue_workers: the queue page's "Workers serving it": the registered workers that claim
-- from queue `queue` (its name in their queues, or every queue: queues NULL) and every worker
-- running jobs of it, registered or not (`registered` false: one of an older pgq, or whose row was
-- pruned). `running`: the jobs of this queue each runs now; `running_all`: its running jobs of every
-- queue (a worker serving several queues is busy with the others' too). Live workers first, then by
-- name. Reads the registry and the running jobs (jobs_running_idx), once.
WITH running AS (
    SELECT j.claimed_by AS worker, count(*) FILTER (WHERE j.queue = %(queue)s::text) AS running,
           count(*) AS running_all
    FROM pgq.jobs j
    WHERE j.status = 'running'
    GROUP BY j.claimed_by
)
SELECT coalesce(w.claimed_by, r.worker) AS worker, w.claimed_by IS NOT NULL AS registered, w.state, w.last_seen,
       coalesce(pgq.worker_live(w.last_seen, w.refresh_s), false) AS live,
       coalesce(r.running, 0) AS running, coalesce(r.running_all, 0) AS running_all
FROM pgq.workers w
FULL JOIN running r ON r.worker = w.claimed_by
WHERE (w.claimed_by IS NOT NULL AND (w.queues IS NULL OR %(queue)s::text = ANY(w.queues))) OR r.running > 0
ORDER BY coalesce(pgq.worker_live(w.last_seen, w.refresh_s), false) DESC, coalesce(w.claimed_by, r.worker),
         w.started_at
