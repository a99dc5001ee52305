-- dashboard_queues: per queue, what the overview shows of its waiting, queued and running jobs:
-- waiting (for parent jobs), ready, scheduled, running, expired leases, retrying (queued again
-- after a failed attempt; among them, unknown_kind: handed back by a worker whose app has no task of
-- their kind, see sql/queue_unknown_kinds.sql), the distinct workers running its jobs, the age of
-- its oldest ready job, when its next scheduled job is due, and whether it is paused (since when, by
-- whom and through which database role); and on every row busy_workers, the distinct workers running
-- jobs of any queue (the overview's "on N workers": every worker running a job has a row here).
-- Paused queues without jobs are listed too, and so are queues holding only waiting jobs.
--
-- Reads waiting, queued and running jobs only, never finished ones, and counts them exactly: the
-- queued jobs index-only through jobs_claim_idx, retrying ones index-only through jobs_retrying_idx,
-- running ones through jobs_running_idx, waiting ones through jobs_waiting_idx. Its cost follows the
-- backlog, not the size of the table. The same counts as the pgq.queue_backlog view, for less: that
-- view tests run_at against now() four times a queued job (ready, scheduled and the two oldest);
-- here a queued job is counted once and tested twice (scheduled, next due), ready being queued minus
-- scheduled and the oldest ready the oldest queued when that one is due: 100,000 queued jobs cost
-- about 17 ms instead of 21 (issue #44). The retrying count no longer reads the jobs: only the
-- unknown_kind count does (last_error is not in the index).
--
-- unknown_kind is counted up to `cap` per queue (UNKNOWN_KINDS_CAP, as sql/queue_unknown_kinds.sql
-- counts each kind), and unknown_kind_capped says the queue has more: it reads the retrying jobs' rows
-- until it found that many, where counting every one of a million handed-back jobs read them all.
WITH queued AS (
    SELECT j.queue, count(*) AS queued,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           min(j.run_at) AS first_run_at,
           min(j.run_at) FILTER (WHERE j.run_at > now()) AS next_run_at
    FROM pgq.jobs j
    WHERE j.status = 'queued'
    GROUP BY j.queue
),
running AS (
    SELECT j.queue, count(*) AS running, count(*) FILTER (WHERE j.lease_expires_at < now()) AS expired_leases,
           count(DISTINCT j.claimed_by) AS workers
    FROM pgq.jobs j
    WHERE j.status = 'running'
    GROUP BY j.queue
),
backlog AS (
    SELECT coalesce(q.queue, r.queue) AS queue, q.queued, q.scheduled, q.first_run_at, q.next_run_at,
           r.running, r.expired_leases, r.workers
    FROM queued q
    FULL JOIN running r ON r.queue = q.queue
),
waiting AS (
    SELECT j.queue, count(*) AS waiting
    FROM pgq.jobs j
    WHERE j.status = 'waiting'
    GROUP BY j.queue
),
retrying AS (
    SELECT j.queue, count(*) AS retrying
    FROM pgq.jobs j
    WHERE j.status = 'queued' AND j.last_error IS NOT NULL
    GROUP BY j.queue
)
SELECT coalesce(b.queue, p.queue, t.queue) AS queue,
       coalesce(t.waiting, 0) AS waiting,
       coalesce(b.queued - b.scheduled, 0) AS ready,
       coalesce(b.scheduled, 0) AS scheduled,
       coalesce(b.running, 0) AS running,
       coalesce(b.expired_leases, 0) AS expired_leases,
       coalesce(r.retrying, 0) AS retrying,
       least(coalesce(u.jobs, 0), %(cap)s::bigint) AS unknown_kind,
       coalesce(u.jobs > %(cap)s::bigint, false) AS unknown_kind_capped,
       coalesce(b.workers, 0) AS workers,
       CASE WHEN b.first_run_at <= now()
            THEN extract(epoch FROM now() - b.first_run_at)::double precision END AS oldest_ready_age_s,
       b.next_run_at,
       p.queue IS NOT NULL AS paused,
       p.paused_at,
       p.paused_by,
       p.paused_role,
       (SELECT count(DISTINCT j.claimed_by) FROM pgq.jobs j WHERE j.status = 'running') AS busy_workers
FROM backlog b
FULL JOIN pgq.paused_queues p ON p.queue = b.queue
FULL JOIN waiting t ON t.queue = coalesce(b.queue, p.queue)
LEFT JOIN retrying r ON r.queue = b.queue
LEFT JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT 1 FROM pgq.jobs j
          WHERE j.status = 'queued' AND j.last_error IS NOT NULL AND j.queue = r.queue
            AND j.last_error LIKE 'no worker of queue %% knows kind %%'
          LIMIT %(cap)s::bigint + 1) n
) u ON r.queue IS NOT NULL
ORDER BY 1
