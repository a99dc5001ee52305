-- pgq schema, revision 0003: views for operators (what is stuck, what fails and why, which worker
-- holds what, how far behind each queue is), the two small indexes they need, and storage settings
-- of pgq.jobs suited to a high-churn queue table. Executed by alembic/versions/0003_observability.py.
--
-- Every view here reads only queued and running jobs (through the partial indexes jobs_claim_idx and
-- jobs_running_idx) or a bounded slice of finished ones (failed jobs through jobs_failed_idx, the
-- newest succeeded jobs through jobs_finished_idx), so it stays cheap however many finished jobs
-- accumulate before retention deletes them.


-- ---------------------------------------------------------------------------------------------
-- Storage settings of pgq.jobs
--
-- Every job is inserted, updated two or more times within seconds (claim; complete, fail or snooze;
-- heartbeats of long jobs) and deleted by retention a few days later. Those updates change `status`
-- or `lease_expires_at`, which partial indexes use, so they are never HOT: every update leaves a dead
-- row version in the heap and in each index it belonged to. The table's health is decided by how
-- quickly that garbage is reclaimed.
--
-- fillfactor = 90: inserts leave a tenth of each page free, so the claim's update of a freshly
-- inserted row (about 200 bytes) usually finds room on the row's own page: one page dirtied instead
-- of two, and the dead version is pruned when the page is next read, without waiting for vacuum.
-- Not lower: measured with bench/churn.py (a million jobs, PostgreSQL 15), 70 made the table up to
-- 20 % bigger and the claim no faster, because these updates are not HOT and vacuum, not free space,
-- decides how fast dead versions go. Applies to pages written from now on.
ALTER TABLE pgq.jobs SET (fillfactor = 90);

-- Autovacuum by absolute numbers instead of a fraction of the table. The default (vacuum at 20 % of
-- the table dead) means a table holding 5 million finished jobs collects a million dead versions
-- before anyone cleans up, and the claim's index scans walk past all of them. With scale factor 0
-- vacuum starts after a fixed 10,000 dead row versions, i.e. every few seconds at thousands of jobs
-- per second, and each run is short because little has piled up.
--
-- Insert-driven vacuum (PostgreSQL 13+) keeps the visibility map current, so the counts of
-- pgq.queue_backlog stay index-only scans, and freezes rows before anti-wraparound vacuum must.
--
-- Analyze after 5,000 changed rows: the planner's statistics follow the mix of queued / running /
-- finished jobs, which swings widely (a burst of 100,000 enqueued jobs, a purge of millions).
--
-- Cost limit 2000 (ten times vacuum_cost_limit's default 200) with a 1 ms delay: a hot queue
-- table lives mostly in shared buffers, so vacuuming it is cheap, and a throttled vacuum that cannot
-- keep up with the churn is the usual way queue tables bloat.
--
-- What no table setting can change: autovacuum visits a database at most every autovacuum_naptime
-- (server-wide, default 1 min). At thousands of jobs per second a minute leaves hundreds of
-- thousands of dead index entries in front of the claim's index scan; bench/churn.py measured the
-- claim of one job going from 0.5 ms right after a vacuum to 4-5 ms before the next one with 1 min,
-- and staying at 0.4-1.2 ms with 10 s. A DBA running a busy queue should lower the naptime.
ALTER TABLE pgq.jobs SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_limit = 2000,
    autovacuum_vacuum_cost_delay = 1
);
-- The indexes keep the default fillfactor (90 for btree): their keys arrive in increasing order
-- (run_at, finished_at, id), so pages split at the right edge and fill up anyway, and since
-- PostgreSQL 14 bottom-up deletion removes the index entries of dead versions before a page splits.


-- ---------------------------------------------------------------------------------------------
-- Indexes for the views

-- Terminally failed jobs by queue and age: pgq.failing_jobs counts the last hour's failures
-- without reading succeeded jobs. Entries are only made when a job fails for good, which is rare, so
-- it costs nothing on the claim / complete path. (Building it reads the table once and blocks
-- writes meanwhile: on a very large table run the upgrade in a quiet moment.) Not keyed by kind: a
-- kind is any text, and one longer than a btree entry (about 2.7 KB) would make its failures
-- impossible to record; the few failed rows are read for their kind instead.
CREATE INDEX jobs_failed_idx ON pgq.jobs (queue, finished_at) WHERE status = 'failed';

-- Jobs waiting for a retry (queued again after a failed attempt). Entries are made by failed
-- attempts, rescues, and snoozes of jobs that failed before; never by a first run.
-- Queue only, not kind, for the reason given above.
CREATE INDEX jobs_retrying_idx ON pgq.jobs (queue) WHERE status = 'queued' AND last_error IS NOT NULL;


-- ---------------------------------------------------------------------------------------------
-- Views

CREATE VIEW pgq.queue_backlog AS
WITH queued AS (
    -- Index-only scan of jobs_claim_idx (queue, priority, run_at, id): queued jobs only.
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS ready,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest_ready_run_at,
           min(j.run_at) FILTER (WHERE j.run_at > now()) AS next_run_at
    FROM pgq.jobs j
    WHERE j.status = 'queued'
    GROUP BY j.queue
),
running AS (
    -- jobs_running_idx: running jobs only, as many as are in flight.
    SELECT j.queue,
           count(*) AS running,
           count(*) FILTER (WHERE j.lease_expires_at < now()) AS expired_leases
    FROM pgq.jobs j
    WHERE j.status = 'running'
    GROUP BY j.queue
)
SELECT coalesce(q.queue, r.queue) AS queue,
       coalesce(q.ready, 0) AS ready,
       coalesce(q.scheduled, 0) AS scheduled,
       coalesce(r.running, 0) AS running,
       coalesce(r.expired_leases, 0) AS expired_leases,
       q.oldest_ready_run_at,
       now() - q.oldest_ready_run_at AS oldest_ready_age,
       q.next_run_at
FROM queued q
FULL JOIN running r ON r.queue = q.queue;
COMMENT ON VIEW pgq.queue_backlog IS
    'Per queue with queued or running jobs: ready (due now), scheduled (run_at in the future), running, '
    'running with an expired lease, run_at and age of the oldest ready job (how far behind the queue '
    'is), and when the next scheduled job is due. Reads only queued and running jobs (partial indexes), '
    'never finished ones: cheap on a big table. Behind pgq''s Prometheus metrics pgq_queue_jobs and '
    'pgq_queue_oldest_ready_age_seconds.';


CREATE VIEW pgq.stuck_jobs AS
WITH typical AS (
    -- What "usual" means: per queue and kind, the 95th percentile run time of the succeeded jobs among
    -- the newest 10,000 finished jobs of the last day (a backward scan of jobs_finished_idx that stops
    -- after 10,000 rows, so the cost is fixed whatever the table holds). Kinds absent from that
    -- sample have no baseline.
    SELECT s.queue, s.kind,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY s.finished_at - s.started_at) AS p95,
           count(*) AS sample
    FROM (
        SELECT j.queue, j.kind, j.status, j.started_at, j.finished_at
        FROM pgq.jobs j
        WHERE j.status IN ('succeeded', 'failed', 'cancelled')
          AND j.finished_at > now() - interval '1 day'
        ORDER BY j.finished_at DESC
        LIMIT 10000
    ) s
    WHERE s.status = 'succeeded' AND s.started_at IS NOT NULL
    GROUP BY s.queue, s.kind
)
SELECT j.id, j.queue, j.kind,
       CASE WHEN j.lease_expires_at < now() THEN 'lease expired' ELSE 'running long' END AS problem,
       j.status, j.claimed_by, j.attempts, j.max_attempts, j.run_at, j.started_at,
       now() - j.started_at AS running_for,
       t.p95 AS usual_run_time,
       j.lease_expires_at,
       j.last_error
FROM pgq.jobs j
LEFT JOIN typical t ON t.queue = j.queue AND t.kind = j.kind
WHERE j.status = 'running'
  AND (j.lease_expires_at < now()
       OR (t.sample >= 20 AND now() - j.started_at > greatest(5 * t.p95, interval '1 minute')))
UNION ALL
SELECT j.id, j.queue, j.kind, 'overdue' AS problem,
       j.status, j.claimed_by, j.attempts, j.max_attempts, j.run_at, j.started_at,
       NULL::interval AS running_for, NULL::interval AS usual_run_time, j.lease_expires_at, j.last_error
FROM pgq.jobs j
WHERE j.status = 'queued'
  AND j.run_at < now() - interval '5 minutes';
COMMENT ON VIEW pgq.stuck_jobs IS
    'Jobs that need a look, one row each, problem = '
    '''lease expired'' (running, its worker stopped renewing the lease: died or hung; rescue will take it back), '
    '''running long'' (running more than 5 times the usual run time of its queue and kind and over a minute; '
    'usual = 95th percentile of its succeeded jobs among the newest 10,000 finished jobs of the last day, kinds with at least 20 of them), '
    '''overdue'' (queued and due for more than 5 minutes: no worker serves the queue, or too few). '
    'Reads running and queued jobs and a fixed-size sample of finished ones. Add ORDER BY / LIMIT as needed.';


CREATE VIEW pgq.failing_jobs AS
WITH failed AS (
    -- jobs_failed_idx: terminal failures of the last hour.
    SELECT j.queue, j.kind, j.last_error, j.finished_at
    FROM pgq.jobs j
    WHERE j.status = 'failed' AND j.finished_at > now() - interval '1 hour'
),
retrying AS (
    -- jobs_retrying_idx: jobs queued again after a failed attempt, waiting for their next one.
    SELECT j.queue, j.kind, j.last_error, NULL::timestamptz AS finished_at
    FROM pgq.jobs j
    WHERE j.status = 'queued' AND j.last_error IS NOT NULL
),
errors AS (
    -- The first line of the error (the exception, without its traceback), with rescues' attempt
    -- details dropped, so that equal causes group together.
    SELECT e.queue, e.kind, e.finished_at IS NOT NULL AS final,
           CASE WHEN e.last_error LIKE 'lease expired at %' THEN 'lease expired'
                ELSE left(split_part(e.last_error, E'\n', 1), 500) END AS error
    FROM (SELECT * FROM failed UNION ALL SELECT * FROM retrying) e
),
per_error AS (
    SELECT x.queue, x.kind, x.error, count(*) AS n,
           count(*) FILTER (WHERE x.final) AS final_n
    FROM errors x
    GROUP BY x.queue, x.kind, x.error
)
SELECT p.queue, p.kind,
       sum(p.final_n)::bigint AS failed_last_hour,
       (sum(p.n) - sum(p.final_n))::bigint AS retrying,
       (array_agg(p.error ORDER BY p.n DESC, p.error))[1] AS top_error,
       max(p.n) AS top_error_count,
       count(*) AS distinct_errors
FROM per_error p
GROUP BY p.queue, p.kind
ORDER BY sum(p.n) DESC, p.queue, p.kind;
COMMENT ON VIEW pgq.failing_jobs IS
    'What is failing most and why, per queue and kind: jobs that failed for good in the last hour, jobs '
    'queued for a retry after a failed attempt, the most frequent error among them (first line of '
    'last_error; rescues count as ''lease expired'') and how often it occurs. Most failures first. '
    'Reads failed and retrying jobs only (partial indexes jobs_failed_idx, jobs_retrying_idx).';


CREATE VIEW pgq.workers AS
SELECT j.claimed_by AS worker,
       count(*) AS running,
       count(*) FILTER (WHERE j.lease_expires_at < now()) AS expired_leases,
       array_agg(DISTINCT j.queue ORDER BY j.queue) AS queues,
       array_agg(DISTINCT j.kind ORDER BY j.kind) AS kinds,
       min(j.started_at) AS oldest_started_at,
       now() - min(j.started_at) AS longest_running_for,
       max(j.lease_expires_at) AS last_lease_expires_at
FROM pgq.jobs j
WHERE j.status = 'running'
GROUP BY j.claimed_by;
COMMENT ON VIEW pgq.workers IS
    'Per worker (claimed_by) holding jobs now: how many it runs, how many of their leases expired (all of '
    'them: the worker is probably gone), its queues and kinds, its longest-running job. Reads running jobs '
    'only (jobs_running_idx). pgq.running_jobs lists the jobs themselves.';
