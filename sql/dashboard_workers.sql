-- dashboard_workers: the workers holding jobs now (pgq.workers: one row per claimed_by of a running
-- job; pgq keeps no registry of idle workers), with how many jobs each runs, how many of their
-- leases expired, their queues and kinds, the start of the oldest, and when the lease of the one
-- renewed last runs out (a worker's heartbeats renew all its leases). Reads running jobs only
-- (jobs_running_idx).
SELECT w.worker, w.running, w.expired_leases, w.queues, w.kinds, w.oldest_started_at,
       w.last_lease_expires_at
FROM pgq.workers w
ORDER BY w.worker
