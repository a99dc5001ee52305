-- Undo revision 0013: drop pgq.explain and the worker registry, and restore pgq.workers as the view
-- of the workers holding jobs (as revision 0003 created it).
DROP TABLE pgq.job_audit;
DROP FUNCTION pgq.explain(bigint);
DROP FUNCTION pgq.worker_prune();
DROP FUNCTION pgq.worker_unregister(uuid, uuid);
DROP FUNCTION pgq.worker_seen(uuid, uuid, text);
DROP FUNCTION pgq.worker_register(text, text, integer, text[], text[], integer, double precision,
                                  double precision, text);
DROP FUNCTION pgq.worker_live(timestamptz, double precision);
DROP TABLE pgq.workers;
DROP VIEW pgq.busy_workers;

CREATE VIEW pgq.workers AS
SELECT j.claimed_by AS worker,
       count(*) AS running,
       count(*) FILTER (WHERE j.lease_expires_at < now()) AS expired_leases,
       array_agg(DISTINCT j.queue ORDER BY j.queue) AS queues,
       array_agg(DISTINCT j.kind ORDER BY j.kind) AS kinds,
       min(j.started_at) AS oldest_started_at,
       now() - min(j.started_at) AS longest_running_for,
       max(j.lease_expires_at) AS last_lease_expires_at
FROM pgq.jobs j
WHERE j.status = 'running'
GROUP BY j.claimed_by;
COMMENT ON VIEW pgq.workers IS
    'Per worker (claimed_by) holding jobs now: how many it runs, how many of their leases expired (all of '
    'them: the worker is probably gone), its queues and kinds, its longest-running job. Reads running jobs '
    'only (jobs_running_idx). pgq.running_jobs lists the jobs themselves.';
