-- dashboard_queue_failed_count: how many jobs of queue `queue` failed for good: an index-only count
-- over jobs_failed_idx (queue, finished_at), exact; its cost follows the queue's failed jobs (which
-- pgq keeps until they are retried, deleted or purged), not the table.
SELECT count(*) AS failed FROM pgq.jobs j WHERE j.status = 'failed' AND j.queue = %(queue)s::text
