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
-- pgq:function pause

-- Resume a queue; returns true if it was paused. Wakes idle workers (NOTIFY on channel pgq), so its
-- ready jobs start at once.
-- pgq:function resume

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
-- pgq:function mark_awaited
REVOKE EXECUTE ON FUNCTION pgq.mark_awaited(bigint) FROM PUBLIC;

-- pgq:function jobs_notify_finished

CREATE TRIGGER jobs_notify_finished
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('succeeded', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION pgq.jobs_notify_finished();


-- Enqueue with watermarks: close the race of an enqueue with the completion of the key's active
-- job (see the lock below). Replaced whole, as CREATE OR REPLACE must; SECURITY DEFINER and the
-- pinned search_path of revision 0002 are restated (a replacement resets them), grants are kept.
-- pgq:function enqueue_many
