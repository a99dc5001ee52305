-- dashboard_workers: every worker, idle ones included: the rows of the registry (pgq.workers,
-- revision 0013) joined by name to the workers holding jobs (pgq.busy_workers: how many jobs each
-- runs, how many of their leases expired, their queues and kinds, the start of the oldest, when the
-- lease renewed last runs out) and the ids of the jobs each runs (at most 20, lowest first). A worker
-- holding jobs without a registry row (one of an older pgq, or whose row was pruned) is listed too,
-- with `registered` false. Live workers first, then by name. Reads the registry and running jobs only
-- (jobs_running_idx).
SELECT coalesce(w.claimed_by, b.worker) AS worker, w.id::text AS id, w.id IS NOT NULL AS registered, w.host, w.pid,
       w.queues AS serves, w.kinds AS knows, w.slots, w.state, w.started_at, w.last_seen, w.version,
       coalesce(pgq.worker_live(w.last_seen, w.refresh_s), false) AS live,
       coalesce(b.running, 0) AS running, coalesce(b.expired_leases, 0) AS expired_leases,
       coalesce(b.queues, '{}') AS queues, coalesce(b.kinds, '{}') AS kinds, b.oldest_started_at,
       b.last_lease_expires_at,
       coalesce((SELECT (array_agg(j.id ORDER BY j.id))[1:20] FROM pgq.jobs j
                 WHERE j.status = 'running' AND j.claimed_by = coalesce(w.claimed_by, b.worker)), '{}') AS job_ids
FROM pgq.workers w
FULL JOIN pgq.busy_workers b ON b.worker = w.claimed_by
ORDER BY coalesce(pgq.worker_live(w.last_seen, w.refresh_s), false) DESC, coalesce(w.claimed_by, b.worker),
         w.started_at
