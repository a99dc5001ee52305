-- queue_stats: the pgq.queue_stats view, one row per queue.
SELECT s.* FROM pgq.queue_stats s ORDER BY s.queue
