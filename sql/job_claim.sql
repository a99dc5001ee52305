-- job_claim: step 2 of a claim. Takes up to `limit` ready jobs from the given queues (all queues when
-- `queues` is NULL) in priority, run_at, id order and starts an attempt on each: a fresh lease token,
-- a lease expiring `lease_s` seconds from now (database clock), attempts + 1.
-- Jobs of kinds that have a concurrency or rate limit are only taken for the kinds locked by step 1
-- (`limited_kinds`, with their `limited_max` and `limited_starts` per `limited_per_s`, NULL where a
-- kind has no such limit), and only as many as both limits leave free. Rate-limited starts are
-- recorded in pgq.rate_limit_starts at statement_timestamp(), which, taken while the kind's lock is
-- held, grows in the order the claims of the kind run.
WITH RECURSIVE
every_queue AS (
    -- Loose index scan over jobs_claim_idx: one probe per distinct queue with queued jobs, instead of
    -- reading every queued row. Only evaluated when no queue list is given.
    (SELECT j.queue FROM pgq.jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgq.jobs j
            WHERE j.status = 'queued' AND j.queue > e.queue ORDER BY j.queue LIMIT 1)
    FROM every_queue e
    WHERE e.queue IS NOT NULL
),
wanted_queue AS (
    -- Paused queues are left out. Exact: pgq.pause() waits for every claim that read
    -- pgq.paused_queues before its row existed (ACCESS EXCLUSIVE lock), so none is claimed after
    -- the pause returned.
    SELECT w.name
    FROM (SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
          UNION
          SELECT e.queue FROM every_queue e WHERE %(queues)s::text[] IS NULL AND e.queue IS NOT NULL) w
    WHERE NOT EXISTS (SELECT 1 FROM pgq.paused_queues p WHERE p.queue = w.name)
),
unlimited AS (
    -- Per queue, an ordered scan of jobs_claim_idx that stops after `limit` rows; rows locked by
    -- other claimers are skipped, not waited for. Limited kinds are excluded by a per-row check;
    -- OFFSET 0 keeps the planner from turning it into an anti-join, which would read and sort every
    -- queued row of the queue instead of stopping after `limit`.
    SELECT c.id, c.priority, c.run_at
    FROM wanted_queue w
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at
        FROM pgq.jobs j
        WHERE j.status = 'queued'
          AND j.queue = w.name
          AND j.run_at <= now()
          AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
          AND NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits l WHERE l.kind = j.kind OFFSET 0)
          AND NOT EXISTS (SELECT 1 FROM pgq.rate_limits r WHERE r.kind = j.kind OFFSET 0)
        ORDER BY j.priority, j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
),
limited AS (
    -- Free slots per locked kind, counted in this statement's snapshot, which is newer than the
    -- lock of step 1 and so includes every earlier claim of the kind: running jobs under the
    -- concurrency limit, starts in the window (statement_timestamp() - per_s, now] under the rate.
    SELECT k.kind, k.per_s,
           greatest(least(
               coalesce(k.max_running - (SELECT count(*) FROM pgq.jobs r
                                         WHERE r.status = 'running' AND r.kind = k.kind), 2147483647),
               coalesce(k.max_starts - (SELECT coalesce(sum(s.starts), 0) FROM pgq.rate_limit_starts s
                                        WHERE s.kind = k.kind
                                          AND s.at > statement_timestamp() - make_interval(secs => k.per_s)),
                        2147483647)), 0) AS free
    FROM unnest(%(limited_kinds)s::text[], %(limited_max)s::integer[], %(limited_starts)s::integer[],
                %(limited_per_s)s::double precision[]) AS k(kind, max_running, max_starts, per_s)
),
limited_rows AS (
    -- For each locked kind, the best `free` ready jobs across the wanted queues, each queue read
    -- through jobs_claim_idx in order.
    SELECT c.id, c.priority, c.run_at
    FROM limited k
    CROSS JOIN LATERAL (
        SELECT x.id, x.priority, x.run_at
        FROM wanted_queue w
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at
            FROM pgq.jobs j
            WHERE j.status = 'queued'
              AND j.queue = w.name
              AND j.kind = k.kind
              AND j.run_at <= now()
            ORDER BY j.priority, j.run_at, j.id
            LIMIT least(k.free, %(limit)s)
            FOR UPDATE SKIP LOCKED
        ) x
        ORDER BY x.priority, x.run_at, x.id
        LIMIT least(k.free, %(limit)s)
    ) c
    WHERE k.free > 0
),
picked AS (
    -- Best `limit` of all candidates. Candidates not picked stay locked only until this
    -- transaction ends, a few milliseconds.
    SELECT a.id
    FROM (SELECT * FROM unlimited UNION ALL SELECT * FROM limited_rows) a
    ORDER BY a.priority, a.run_at, a.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE pgq.jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        claimed_by = %(worker)s,
        started_at = statement_timestamp()
    -- id = ANY(ARRAY(...)) rather than a join: the planner then always updates through jobs_pkey,
    -- where a join with a large `limit` may pick a hash join over a scan of the whole table.
    WHERE j.id = ANY(ARRAY(SELECT p.id FROM picked p))
    -- Every column of pgq.jobs in table order (pgq.models.Job's field order), read as one tuple per
    -- row; the token and status as text, which the worker keeps as str anyway.
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.status::text, j.run_at, j.attempts, j.max_attempts,
              j.dedupe_key, j.lease_token::text, j.lease_expires_at, j.claimed_by, j.last_error, j.result,
              j.input_watermark, j.done_watermark, j.created_at, j.started_at, j.finished_at, j.progress
),
-- The window of each rate-limited kind: this claim's starts in, the starts that left it out.
rate_started AS (
    INSERT INTO pgq.rate_limit_starts (kind, at, starts)
    SELECT c.kind, statement_timestamp(), count(*)
    FROM claimed c
    JOIN limited k ON k.kind = c.kind AND k.per_s IS NOT NULL
    GROUP BY c.kind
),
rate_expired AS (
    DELETE FROM pgq.rate_limit_starts s
    USING limited k
    WHERE k.per_s IS NOT NULL AND s.kind = k.kind
      AND s.at <= statement_timestamp() - make_interval(secs => k.per_s)
)
-- In claim order, sorted here rather than by each worker: the worker starts them in this order.
SELECT * FROM claimed c
ORDER BY c.priority, c.run_at, c.id
