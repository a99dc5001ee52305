-- dashboard_queue_counts: the queue page's counts of the finished jobs pgq keeps per queue: how many
-- jobs of queue `queue` failed for good (`failed`, exact: an index-only count over jobs_failed_idx
-- (queue, finished_at), whose cost follows the queue's failed jobs, which pgq keeps until they are
-- retried, deleted or purged), and how many were cancelled (`cancelled`, up to `cap`; an index-only
-- count over jobs_cancelled_idx, revision 0031, that stops there: `cancelled` is then `cap` and
-- `cancelled_capped` true). Cancelled jobs pile up where a parent's failure cancels its dependents by
-- the thousand, and are not the page's point: the cap bounds what the count reads on every refresh.
SELECT (SELECT count(*) FROM pgq.jobs j WHERE j.status = 'failed' AND j.queue = %(queue)s::text) AS failed,
       least(c.jobs, %(cap)s::bigint) AS cancelled,
       c.jobs > %(cap)s::bigint AS cancelled_capped
FROM (SELECT count(*) AS jobs
      FROM (SELECT 1 FROM pgq.jobs j
            WHERE j.status = 'cancelled' AND j.id >= '-9223372036854775808'::bigint AND j.queue = %(queue)s::text
            LIMIT %(cap)s::bigint + 1) n) c
