-- dashboard_queue_tab: one state tab of the queue page (/queues/NAME): the jobs of queue `queue` in
-- state `tab`, at most `limit`, in the order that tab is read by; columns as dashboard_jobs.sql.
-- Each branch reads one partial index, filtered to the queue, so the cost of a tab follows the
-- queue's jobs in that state (its backlog, or its failed jobs), never the size of the table:
--   ready:            jobs_claim_idx (queue, limited, priority, run_at, id; status 'queued') in claim
--                     order (priority, due time, id): read in that order for limited = false and for
--                     limited = true, and the two merged, so that it stops at the page (ordered by
--                     queue and priority alone it read and sorted every ready job of the queue, 60,000
--                     of them behind the page of a big queue);
--   scheduled:        jobs_claim_idx, by due time;
--   retrying:         jobs_retrying_idx (queued again after a failed attempt), next due first;
--   running:          jobs_running_idx, longest running first;
--   waiting:          jobs_waiting_idx (waiting for parent jobs), oldest first;
--   failed:           jobs_failed_idx (queue, finished_at), newest first;
--   cancelled:        jobs_cancelled_idx (queue, finished_at, id; revision 0031), newest first: it
--                     says the index's condition `id >= least bigint` (see revision 0031 for why).
-- Only the branch whose `tab` matches runs: the others are cut off by their constant condition at
-- execution (a one-time filter), whatever plan is cached. `ord` numbers the picked jobs in their
-- tab's order (over the page only), which the join with their rows need not keep: on a small table
-- a hash join did not.
SELECT j.id, j.queue, j.kind, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.dedupe_key, j.claimed_by, j.group_key,
       left(j.last_error, 300) AS last_error
FROM (
    (SELECT p.id, row_number() OVER (ORDER BY p.priority, p.run_at, p.id) AS ord
     FROM ((SELECT j.id, j.priority, j.run_at FROM pgq.jobs j
            WHERE %(tab)s::text = 'ready' AND j.status = 'queued' AND j.queue = %(queue)s::text
              AND j.limited = false AND j.run_at <= now()
            ORDER BY j.priority, j.run_at, j.id LIMIT %(limit)s)
           UNION ALL
           (SELECT j.id, j.priority, j.run_at FROM pgq.jobs j
            WHERE %(tab)s::text = 'ready' AND j.status = 'queued' AND j.queue = %(queue)s::text
              AND j.limited = true AND j.run_at <= now()
            ORDER BY j.priority, j.run_at, j.id LIMIT %(limit)s)
           ORDER BY 2, 3, 1 LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.run_at, p.id) AS ord
     FROM (SELECT j.id, j.run_at FROM pgq.jobs j
           WHERE %(tab)s::text = 'scheduled' AND j.status = 'queued' AND j.queue = %(queue)s::text
             AND j.run_at > now()
           ORDER BY j.run_at, j.id LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.run_at, p.id) AS ord
     FROM (SELECT j.id, j.run_at FROM pgq.jobs j
           WHERE %(tab)s::text = 'retrying' AND j.status = 'queued' AND j.last_error IS NOT NULL
             AND j.queue = %(queue)s::text
           ORDER BY j.run_at, j.id LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.started_at, p.id) AS ord
     FROM (SELECT j.id, j.started_at FROM pgq.jobs j
           WHERE %(tab)s::text = 'running' AND j.status = 'running' AND j.queue = %(queue)s::text
           ORDER BY j.started_at, j.id LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.id) AS ord
     FROM (SELECT j.id FROM pgq.jobs j
           WHERE %(tab)s::text = 'waiting' AND j.status = 'waiting' AND j.queue = %(queue)s::text
           ORDER BY j.id LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.finished_at DESC, p.id DESC) AS ord
     FROM (SELECT j.id, j.finished_at FROM pgq.jobs j
           WHERE %(tab)s::text = 'failed' AND j.status = 'failed' AND j.queue = %(queue)s::text
           ORDER BY j.finished_at DESC, j.id DESC LIMIT %(limit)s) p)
    UNION ALL
    (SELECT p.id, row_number() OVER (ORDER BY p.finished_at DESC, p.id DESC) AS ord
     FROM (SELECT j.id, j.finished_at FROM pgq.jobs j
           WHERE %(tab)s::text = 'cancelled' AND j.status = 'cancelled' AND j.id >= '-9223372036854775808'::bigint
             AND j.queue = %(queue)s::text
           ORDER BY j.finished_at DESC, j.id DESC LIMIT %(limit)s) p)
) picked
JOIN LATERAL (SELECT * FROM pgq.jobs j WHERE j.id = picked.id) j ON true
ORDER BY picked.ord
