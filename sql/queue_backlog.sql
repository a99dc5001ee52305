-- queue_backlog: the pgq.queue_backlog view for the given queues (all when `queues` is NULL), behind
-- the worker's Prometheus queue gauges. The view reads only queued and running jobs through the
-- partial indexes, never finished ones, so a scrape stays cheap on a big table; ages come from the
-- database clock.
SELECT b.queue, b.ready, b.scheduled, b.running, b.expired_leases,
       extract(epoch FROM b.oldest_ready_age)::double precision AS oldest_ready_age_s
FROM pgq.queue_backlog b
WHERE %(queues)s::text[] IS NULL OR b.queue = ANY(%(queues)s::text[])
ORDER BY b.queue
