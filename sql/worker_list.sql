-- worker_list: the worker registry, live workers first, each with the jobs it runs now (by
-- claimed_by: at most 100 ids, lowest first, and their count). `live` per pgq.worker_live; a stale
-- row stays listed until the rescue prunes it. The token column is never read (no pgq role but the
-- admin may). Reads pgq.workers (one row per worker) and running jobs (jobs_running_idx).
SELECT w.id, w.claimed_by, w.host, w.pid, w.queues, w.kinds, w.slots, w.lease_s, w.started_at,
       w.last_seen, w.version, w.state, pgq.worker_live(w.last_seen, w.refresh_s) AS live,
       coalesce(r.n, 0) AS running_count, coalesce(r.ids, '{}') AS running
FROM pgq.workers w
LEFT JOIN (SELECT j.claimed_by, count(*) AS n, (array_agg(j.id ORDER BY j.id))[1:100] AS ids
           FROM pgq.jobs j WHERE j.status = 'running' GROUP BY j.claimed_by) r ON r.claimed_by = w.claimed_by
ORDER BY pgq.worker_live(w.last_seen, w.refresh_s) DESC, w.claimed_by, w.started_at
