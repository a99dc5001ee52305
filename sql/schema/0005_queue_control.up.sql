-- pgq schema, revision 0005: pausing queues. A paused queue is a row of pgq.paused_queues; the claim
-- statements skip its jobs, so no worker anywhere starts one until the queue is resumed, without a
-- restart. Enqueueing is unaffected and running jobs finish.

CREATE TABLE pgq.paused_queues (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text NOT NULL DEFAULT current_user
);
COMMENT ON TABLE pgq.paused_queues IS
    'Queues no worker claims from (pgq.pause / pgq.resume), with when and by whom they were paused. '
    'Enqueueing into a paused queue still works; running jobs finish.';

COMMENT ON COLUMN pgq.paused_queues.queue IS 'The paused queue''s name.';
COMMENT ON COLUMN pgq.paused_queues.paused_at IS 'When it was paused (database clock).';
COMMENT ON COLUMN pgq.paused_queues.paused_by IS 'The role that paused it.';

-- Pause a queue; returns true if it was running, false if it was paused already. When this returns
-- (its transaction commits) no claim can take a job of the queue any more: the ACCESS EXCLUSIVE lock
-- waits for every claim that read pgq.paused_queues before the new row existed, and claims that
-- start meanwhile wait for this transaction and then see the row (a READ COMMITTED statement takes
-- its snapshot after its table locks). A claim holds the lock a few milliseconds; lock_timeout
-- bounds the wait should one hang (a frozen worker), and then nothing is written.
CREATE FUNCTION pgq.pause(queue_name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fn$
BEGIN
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'pgq.pause: the queue name must be a non-empty text' USING ERRCODE = '22023';
    END IF;
    -- Locked before the insert, never upgraded after it: two concurrent pauses queue up here
    -- instead of deadlocking.
    LOCK TABLE pgq.paused_queues IN ACCESS EXCLUSIVE MODE;
    INSERT INTO pgq.paused_queues (queue) VALUES (queue_name) ON CONFLICT (queue) DO NOTHING;
    RETURN FOUND;
END;
$fn$;
COMMENT ON FUNCTION pgq.pause(text) IS
    'Pause a queue: no worker claims its jobs once this returns (true: newly paused, false: paused '
    'already). Enqueueing still works; running jobs finish. Needs an administrator (pgq_admin).';

-- Resume a queue; returns true if it was paused. Wakes idle workers (NOTIFY on channel pgq), so its
-- ready jobs start at once.
CREATE FUNCTION pgq.resume(queue_name text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    DELETE FROM pgq.paused_queues WHERE queue = queue_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgq', CASE WHEN octet_length(queue_name) <= 1000 THEN queue_name ELSE '*' END);
    RETURN true;
END;
$fn$;
COMMENT ON FUNCTION pgq.resume(text) IS
    'Resume a paused queue (true: it was paused) and wake idle workers. Needs an administrator.';

-- queue_stats gains whether each queue is paused (and since when), and lists paused queues that hold
-- no jobs. Columns may only be added at the end.
CREATE OR REPLACE VIEW pgq.queue_stats AS
WITH counted AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.status = 'queued' AND j.run_at <= now())        AS ready,
           count(*) FILTER (WHERE j.status = 'queued' AND j.run_at > now())         AS scheduled,
           count(*) FILTER (WHERE j.status = 'running')                            AS running,
           count(*) FILTER (WHERE j.status = 'running' AND j.lease_expires_at < now()) AS expired_leases,
           count(*) FILTER (WHERE j.status = 'succeeded')                          AS succeeded,
           count(*) FILTER (WHERE j.status = 'failed')                             AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled')                          AS cancelled,
           now() - min(j.run_at) FILTER (WHERE j.status = 'queued' AND j.run_at <= now()) AS oldest_ready_age,
           count(*) FILTER (WHERE j.finished_at > now() - interval '1 minute'
                              AND j.status = 'succeeded')                          AS succeeded_last_minute
    FROM pgq.jobs j
    GROUP BY j.queue
)
SELECT coalesce(c.queue, p.queue) AS queue,
       coalesce(c.ready, 0) AS ready,
       coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.running, 0) AS running,
       coalesce(c.expired_leases, 0) AS expired_leases,
       coalesce(c.succeeded, 0) AS succeeded,
       coalesce(c.failed, 0) AS failed,
       coalesce(c.cancelled, 0) AS cancelled,
       c.oldest_ready_age,
       coalesce(c.succeeded_last_minute, 0) AS succeeded_last_minute,
       p.queue IS NOT NULL AS paused,
       p.paused_at
FROM counted c
FULL JOIN pgq.paused_queues p ON p.queue = c.queue;
COMMENT ON VIEW pgq.queue_stats IS
    'Per queue: ready, scheduled (run_at in the future), running, expired leases, finished counts, '
    'age of the oldest ready job, jobs that succeeded in the last minute, and whether the queue is '
    'paused (since when). Scans pgq.jobs.';

-- Awaiting a result (Queue.wait). A waiter marks the job `awaited` (sql/job_wait_mark.sql) while it
-- listens on channel pgq_finished; when a marked job reaches succeeded, failed or cancelled, the
-- trigger below notifies '<id>' as the finishing transaction commits. Only marked jobs notify: the
-- WHEN clause is a plain column test, evaluated without a function call, so draining jobs nobody
-- waits for costs nothing more. Nullable without a default: adding it rewrites nothing.
ALTER TABLE pgq.jobs ADD COLUMN awaited boolean;
COMMENT ON COLUMN pgq.jobs.awaited IS
    'True once a client waits for the job''s outcome (Queue.wait): finishing it then notifies channel '
    'pgq_finished with the job id.';

-- Mark a job awaited and return it; no row when it is not queued or running, or marked already
-- (sql/job_wait_mark.sql then reads it anew). A definer function, so that a producer may mark a job
-- without UPDATE on pgq.jobs, a privilege that would also let it lock job rows (SELECT ... FOR
-- UPDATE) and stall workers. EXECUTE is granted by `pgq roles`.
CREATE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET awaited = true
    WHERE j.id = job_id AND j.status IN ('queued', 'running') AND j.awaited IS NOT TRUE
    RETURNING j.*;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.mark_awaited(bigint) FROM PUBLIC;
COMMENT ON FUNCTION pgq.mark_awaited(bigint) IS
    'Mark a queued or running job awaited (Queue.wait): finishing it then notifies channel '
    'pgq_finished. Returns the job, or no row when it was not marked now.';

CREATE FUNCTION pgq.jobs_notify_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pg_notify('pgq_finished', NEW.id::text);
    RETURN NULL;
END;
$fn$;
COMMENT ON FUNCTION pgq.jobs_notify_finished() IS
    'Trigger of pgq.jobs: an awaited job that finishes notifies channel pgq_finished with its id.';

CREATE TRIGGER jobs_notify_finished
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('succeeded', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION pgq.jobs_notify_finished();


-- Enqueue with watermarks: close the race of an enqueue with the completion of the key's active
-- job (see the lock below). Replaced whole, as CREATE OR REPLACE must; SECURITY DEFINER and the
-- pinned search_path of revision 0002 are restated (a replacement resets them), grants are kept.
CREATE OR REPLACE FUNCTION pgq.enqueue_many(
    kinds         text[],
    payloads      jsonb[],
    queues        text[],
    priorities    smallint[],
    run_ats       timestamptz[],
    delays        double precision[],
    dedupe_keys   text[],
    watermarks    bigint[],
    max_attempts  integer[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF cardinality(array_remove(dedupe_keys, NULL)) = 0 THEN
        -- No job carries a dedupe key: a plain insert. Ids come from the sequence in input order
        -- (ORDER BY ord), so sorting the returned ids restores the caller's order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark)
            SELECT i.kind, coalesce(i.payload, '{}'), coalesce(i.queue, 'default'), coalesce(i.priority, 0),
                   coalesce(i.run_at, now() + make_interval(secs => i.delay), now()),
                   coalesce(i.max_attempts, 25), i.watermark
            FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, watermarks, max_attempts)
                 WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, watermark, max_attempts, ord)
            ORDER BY i.ord
            RETURNING pgq.jobs.id
        )
        SELECT row_number() OVER (ORDER BY ins.id), ins.id FROM ins;
    ELSE
        IF cardinality(array_remove(watermarks, NULL)) > 0 THEN
            -- Wait for any acknowledgement in flight of an active job holding one of these keys, and
            -- keep new ones out until this transaction ends: lock those rows first, in id order (the
            -- order job_complete locks them), then decide in the statement below, whose snapshot is
            -- newer than the lock. Without this, a run finishing between that statement's snapshot
            -- and its insert freed the key unseen: the insert then created a second run of input
            -- the finished run had already processed (its watermark was not yet in key_watermarks).
            PERFORM 1
            FROM pgq.jobs j
            JOIN (SELECT DISTINCT coalesce(i.queue, 'default') AS queue, i.dedupe_key
                  FROM unnest(queues, dedupe_keys) AS i(queue, dedupe_key)
                  WHERE i.dedupe_key IS NOT NULL) k
              ON j.queue = k.queue AND j.dedupe_key = k.dedupe_key
            WHERE j.status IN ('queued', 'running')
            ORDER BY j.id
            FOR UPDATE OF j;
        END IF;
        RETURN QUERY
        WITH input AS (
            -- Every input row reserves an id up front, so a row keeps a stable id whatever the
            -- dedupe below decides (a reserved id that is not used leaves a gap, as rollbacks do).
            SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id,
                   i.kind, coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
                   coalesce(i.priority, 0)::smallint AS priority,
                   coalesce(i.run_at, now() + make_interval(secs => i.delay), now()) AS run_at,
                   i.dedupe_key, i.watermark, coalesce(i.max_attempts, 25) AS max_attempts
            FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, watermarks,
                        max_attempts)
                 WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, dedupe_key, watermark,
                                      max_attempts, ord)
        ),
        keyed AS (
            -- One representative per (queue, key) in this call: ON CONFLICT may touch a row only
            -- once per statement. It carries the highest watermark given for the key.
            SELECT DISTINCT ON (k.queue, k.dedupe_key) k.ord, k.id, k.kind, k.payload, k.queue, k.priority,
                   k.run_at, k.dedupe_key,
                   max(k.watermark) OVER (PARTITION BY k.queue, k.dedupe_key) AS watermark, k.max_attempts
            FROM input k
            WHERE k.dedupe_key IS NOT NULL
            ORDER BY k.queue, k.dedupe_key, k.ord
        ),
        processed AS (
            -- Input a successful run already covered: enqueue nothing, answer with that run's job.
            SELECT k.queue, k.dedupe_key, w.job_id
            FROM keyed k
            JOIN pgq.key_watermarks w ON w.queue = k.queue AND w.dedupe_key = k.dedupe_key
            WHERE k.watermark IS NOT NULL AND w.done_watermark >= k.watermark
        ),
        ins AS (
            INSERT INTO pgq.jobs AS j (id, kind, payload, queue, priority, run_at, dedupe_key,
                                       input_watermark, max_attempts)
            SELECT n.id, n.kind, n.payload, n.queue, n.priority, n.run_at, n.dedupe_key, n.watermark,
                   n.max_attempts
            FROM (
                SELECT u.ord, u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.dedupe_key,
                       u.watermark, u.max_attempts
                FROM input u WHERE u.dedupe_key IS NULL
                UNION ALL
                SELECT k.ord, k.id, k.kind, k.payload, k.queue, k.priority, k.run_at, k.dedupe_key,
                       k.watermark, k.max_attempts
                FROM keyed k
                WHERE NOT EXISTS (SELECT 1 FROM processed p
                                  WHERE p.queue = k.queue AND p.dedupe_key = k.dedupe_key)
            ) n
            ORDER BY n.ord
            -- An active job holds the key: keep it, and raise its input watermark monotonically.
            -- If it is running, the raised watermark makes its completion re-queue it (dirty re-run).
            ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
            DO UPDATE SET input_watermark = greatest(j.input_watermark, excluded.input_watermark)
            RETURNING j.id, j.queue, j.dedupe_key
        )
        SELECT u.ord,
               CASE WHEN u.dedupe_key IS NULL THEN u.id
                    ELSE coalesce(
                        (SELECT p.job_id FROM processed p WHERE p.queue = u.queue AND p.dedupe_key = u.dedupe_key),
                        (SELECT r.id FROM ins r WHERE r.queue = u.queue AND r.dedupe_key = u.dedupe_key))
               END
        FROM input u
        ORDER BY u.ord;
    END IF;

    -- Wake idle workers: one notification per queue. Postgres also folds identical notifications
    -- of one transaction into one, so a batch of 100,000 jobs sends a handful of short messages.
    -- A queue name too long for a NOTIFY payload (8000 bytes) wakes every worker ('*').
    PERFORM pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)
    FROM (SELECT DISTINCT coalesce(x, 'default') AS queue FROM unnest(queues) AS x) q;
END;
$fn$;
