-- queue_live_workers: per queue of `queues`, how many live workers (pgq.workers rows that are live and
-- not draining) claim from it, a worker serving every queue (queues NULL) counting for each. Behind
-- the worker's pgq_queue_live_workers gauge; reads the registry only (one row per worker).
SELECT q.queue,
       (SELECT count(*) FROM pgq.workers w
        WHERE w.state = 'running' AND pgq.worker_live(w.last_seen, w.refresh_s)
          AND (w.queues IS NULL OR q.queue = ANY(w.queues))) AS live_workers
FROM unnest(%(queues)s::text[]) AS q(queue)
ORDER BY q.queue
