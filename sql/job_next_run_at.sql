-- job_next_run_at: seconds (database clock) until the earliest queued job of the given queues (all
-- queues when `queues` is NULL) is due, negative when one is due already; NULL when nothing is queued.
-- An idle worker asks this after a claim came back short and sleeps until then when that is sooner
-- than its poll interval, so scheduled jobs and retries start on time without fast polling.
-- Answered by loose index scans over jobs_claim_idx (queue, limited, priority, run_at, id): per queue
-- and part, one probe per distinct priority, then one probe for the first run_at of each. It never reads every
-- queued row, so a million jobs scheduled for later cost a handful of index probes.
WITH RECURSIVE
every_queue AS (
    -- Distinct queues that have queued jobs; only evaluated when no queue list is given.
    (SELECT j.queue FROM pgq.jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue > e.queue ORDER BY j.queue LIMIT 1)
    FROM every_queue e
    WHERE e.queue IS NOT NULL
),
wanted_queue AS (
    SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
    UNION
    SELECT e.queue FROM every_queue e WHERE %(queues)s::text[] IS NULL AND e.queue IS NOT NULL
),
queue_priority AS (
    -- Distinct priorities of queued jobs, per queue and part of jobs_claim_idx (unlimited kinds,
    -- limited kinds: the index's second column).
    SELECT w.name AS queue, l.limited,
           (SELECT j.priority FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue = w.name AND j.limited = l.limited
            ORDER BY j.priority LIMIT 1) AS priority
    FROM wanted_queue w CROSS JOIN (VALUES (false), (true)) AS l(limited)
    UNION ALL
    SELECT p.queue, p.limited,
           (SELECT j.priority FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue = p.queue AND j.limited = p.limited AND j.priority > p.priority
            ORDER BY j.priority LIMIT 1)
    FROM queue_priority p
    WHERE p.priority IS NOT NULL
)
SELECT extract(epoch FROM min(
           (SELECT j.run_at FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue = p.queue AND j.limited = p.limited AND j.priority = p.priority
            ORDER BY j.run_at LIMIT 1)) - now())::double precision AS seconds
FROM queue_priority p
WHERE p.priority IS NOT NULL
