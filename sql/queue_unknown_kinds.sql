-- queue_unknown_kinds: per queue and kind, the queued jobs that no live worker claiming from the
-- queue knows (no task of its app has the kind: a rolling deploy, or a kind served by workers not
-- started yet): in queues that have a live worker (a queue with none is pgq.explain's
-- no_live_worker), and jobs an older worker handed back for their kind (their last_error says so,
-- sql/job_error_set.sql) wherever they are. Since issue #42 a worker claims only the kinds it knows,
-- so such jobs stay queued and untouched until a worker that knows them starts. Reads the registry
-- (one row per worker) and the queued jobs, as pgq.queue_stats reads the jobs beside it.
WITH serving AS (
    SELECT w.queues, w.kinds FROM pgq.workers w
    WHERE w.state = 'running' AND pgq.worker_live(w.last_seen, w.refresh_s)
)
SELECT j.queue, j.kind, count(*) AS jobs
FROM pgq.jobs j
WHERE j.status = 'queued'
  AND (EXISTS (SELECT 1 FROM serving s WHERE s.queues IS NULL OR j.queue = ANY(s.queues))
       OR j.last_error LIKE 'no worker of queue %% knows kind %%')
  AND NOT EXISTS (SELECT 1 FROM serving s
                  WHERE (s.queues IS NULL OR j.queue = ANY(s.queues)) AND j.kind = ANY(s.kinds))
GROUP BY j.queue, j.kind
ORDER BY j.queue, j.kind
