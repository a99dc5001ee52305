-- queue_unknown_kinds: per queue and kind, the queued jobs that no live worker claiming from the
-- queue knows (no task of its app has the kind: a rolling deploy, or a kind served by workers not
-- started yet): in queues that have a live worker (a queue with none is pgq.explain's
-- no_live_worker), and jobs an older worker handed back for their kind (their last_error says so,
-- sql/job_error_set.sql) wherever they are. Since issue #42 a worker claims only the kinds it knows,
-- so such jobs stay queued and untouched until a worker that knows them starts.
--
-- Read by `pgq status`, the dashboard's overview and every metrics scrape (pgq/metrics.py), so its
-- cost follows the unknown jobs, not the queue: the distinct (queue, kind) pairs of queued jobs come
-- from loose index scans of jobs_claim_kind_idx (unlimited kinds, revision 0027) and
-- jobs_claim_limited_idx, one probe per pair; only the pairs no live worker knows are counted, from
-- those indexes (index-only where the visibility map allows), and in queues without a live worker
-- only the handed-back rows (jobs_retrying_idx). Reading every queued job cost 650 ms at 1,000,000.
--
-- Each pair is counted up to a cap (the parameter) and no further (issue #44): counting 990,000 jobs of an
-- unknown kind cost 260 ms on every overview refresh and metrics scrape. A pair with more says so
-- (`capped`, its `jobs` then the cap): the numbers are exact below the cap and a floor at it.
-- Its plan is costed over the JIT threshold: run it in a transaction under transaction_guard.sql
-- (jit off), as queue_stats and queue_backlog do; compiling it cost some 290 ms per run.
WITH RECURSIVE serving AS (
    SELECT w.queues, w.kinds FROM pgq.workers w
    WHERE w.state = 'running' AND pgq.worker_live(w.last_seen, w.refresh_s)
),
loose AS (
    (SELECT j.queue, j.kind FROM pgq.jobs j
     WHERE j.status = 'queued' AND j.limited IS NOT TRUE
     ORDER BY j.queue, j.kind LIMIT 1)
    UNION ALL
    SELECT n.queue, n.kind
    FROM loose p
    CROSS JOIN LATERAL (SELECT j.queue, j.kind FROM pgq.jobs j
                        WHERE j.status = 'queued' AND j.limited IS NOT TRUE AND (j.queue, j.kind) > (p.queue, p.kind)
                        ORDER BY j.queue, j.kind LIMIT 1) n
),
held AS (
    (SELECT j.queue, j.kind FROM pgq.jobs j
     WHERE j.status = 'queued' AND j.limited
     ORDER BY j.queue, j.kind LIMIT 1)
    UNION ALL
    SELECT n.queue, n.kind
    FROM held p
    CROSS JOIN LATERAL (SELECT j.queue, j.kind FROM pgq.jobs j
                        WHERE j.status = 'queued' AND j.limited AND (j.queue, j.kind) > (p.queue, p.kind)
                        ORDER BY j.queue, j.kind LIMIT 1) n
),
unknown AS MATERIALIZED (  -- the known pairs are never counted
    SELECT p.queue, p.kind,
           EXISTS (SELECT 1 FROM serving s WHERE s.queues IS NULL OR p.queue = ANY(s.queues)) AS served
    FROM (SELECT l.queue, l.kind FROM loose l UNION SELECT h.queue, h.kind FROM held h) p
    WHERE NOT EXISTS (SELECT 1 FROM serving s
                      WHERE (s.queues IS NULL OR p.queue = ANY(s.queues)) AND p.kind = ANY(s.kinds))
)
SELECT u.queue, u.kind, least(c.jobs, %(cap)s::bigint) AS jobs, c.jobs > %(cap)s::bigint AS capped
FROM unknown u
CROSS JOIN LATERAL (
    SELECT CASE WHEN u.served
                THEN (SELECT count(*) FROM (SELECT 1 FROM pgq.jobs j
                                           WHERE j.status = 'queued' AND j.limited IS NOT TRUE
                                             AND j.queue = u.queue AND j.kind = u.kind
                                           LIMIT %(cap)s::bigint + 1) n)
                     + (SELECT count(*) FROM (SELECT 1 FROM pgq.jobs j
                                             WHERE j.status = 'queued' AND j.limited
                                               AND j.queue = u.queue AND j.kind = u.kind
                                             LIMIT %(cap)s::bigint + 1) n)
                ELSE (SELECT count(*) FROM (SELECT 1 FROM pgq.jobs j
                                           WHERE j.status = 'queued' AND j.last_error IS NOT NULL
                                             AND j.queue = u.queue AND j.kind = u.kind
                                             AND j.last_error LIKE 'no worker of queue %% knows kind %%'
                                           LIMIT %(cap)s::bigint + 1) n)
           END AS jobs
    OFFSET 0  -- evaluated once per pair: flattened, the counts ran again for each use of c.jobs
) c
WHERE c.jobs > 0
ORDER BY u.queue, u.kind
