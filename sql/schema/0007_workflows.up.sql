-- pgq schema, revision 0007: workflows. A job may depend on other jobs (its parents): it waits, in
-- the new status `waiting`, until every parent has finished, and runs only if they all succeeded
-- (or, when enqueued with on_parent_failure = 'run', whatever their outcome: a batch callback).
-- The completion of a parent releases its children in the same transaction: a counter per child,
-- decremented by a trigger; no polling, no scan. Follow-up jobs of a handler (pgq.after_success) need
-- nothing here: the worker inserts them in the transaction that completes the attempt.
--
-- The new enum value is added in the migration's own transaction and never used by it as a value:
-- Postgres refuses a value added in the same transaction ("unsafe use of new enum value") in view
-- and SQL function bodies, which are analysed when created. Those compare `status::text` instead;
-- PL/pgSQL bodies are only planned when first run, after the migration committed.
ALTER TYPE pgq.job_status ADD VALUE IF NOT EXISTS 'waiting' BEFORE 'queued';

-- Both nullable without a default: adding them rewrites nothing, and plain jobs leave them NULL.
ALTER TABLE pgq.jobs ADD COLUMN pending_parents integer;
ALTER TABLE pgq.jobs ADD COLUMN has_dependents boolean;
COMMENT ON COLUMN pgq.jobs.pending_parents IS
    'Parents this job still waits for (status waiting while above 0); NULL: the job has no parents.';
COMMENT ON COLUMN pgq.jobs.has_dependents IS
    'True when jobs depend on this one: finishing it releases or cancels them (trigger '
    'jobs_release_dependents). NULL for other jobs, which the trigger then never runs for.';

-- No foreign keys: one to pgq.jobs would forbid `TRUNCATE pgq.jobs` (which test suites and
-- benchmarks use) and add a lookup to every deletion of a job. Purge deletes a child's rows with the
-- child (sql/job_purge.sql); pgq.enqueue_after checks that parents exist.
CREATE TABLE pgq.job_dependencies (
    job_id         bigint NOT NULL,
    parent_id      bigint NOT NULL,
    needs_success  boolean NOT NULL,
    parent_outcome pgq.job_status,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, parent_id),
    CONSTRAINT job_dependencies_not_self CHECK (job_id <> parent_id)
);
-- Children of a parent: what its completion reads.
CREATE INDEX job_dependencies_parent_idx ON pgq.job_dependencies (parent_id);
COMMENT ON TABLE pgq.job_dependencies IS
    'One row per dependency: job_id runs after parent_id. Parents of job 42: WHERE job_id = 42; its '
    'children: WHERE parent_id = 42. Purging the child deletes its rows; a purged parent''s rows stay, '
    'its outcome recorded.';
COMMENT ON COLUMN pgq.job_dependencies.job_id IS 'The dependent job (the child).';
COMMENT ON COLUMN pgq.job_dependencies.parent_id IS 'The job it depends on (the parent).';
COMMENT ON COLUMN pgq.job_dependencies.needs_success IS
    'True: the child is cancelled if this parent fails or is cancelled. False (on_parent_failure = '
    '''run''): the child runs once the parent finished, whatever the outcome.';
COMMENT ON COLUMN pgq.job_dependencies.parent_outcome IS
    'How the parent finished (succeeded, failed or cancelled), once it did; NULL while the child waits for it.';
COMMENT ON COLUMN pgq.job_dependencies.created_at IS 'When the dependency was enqueued.';


-- Enqueue jobs that depend on others: parallel arrays as pgq.enqueue_many, with the dependencies as
-- an edge list (edge_jobs: 1-based position of the job in the batch; edge_parents: the parent's id).
-- Dedupe keys and watermarks are not taken here (pgq.enqueue refuses them with depends_on). Each job
-- is inserted
--   waiting   while some parent has not finished;
--   cancelled when a parent it needs to succeed already failed or was cancelled (last_error says
--             which), unless run_on_failure;
--   queued    when every parent already finished as it needs.
-- Parents are locked first (in id order, the order acknowledgements lock them): a parent finishing
-- concurrently either finished before (its outcome is read here) or waits for this transaction and
-- then sees the new dependency rows. A missing parent raises (SQLSTATE 23503) and writes nothing.
-- pgq:function enqueue_after
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[]) FROM PUBLIC;


-- A parent finished: record its outcome on its dependency rows, cancel the children that needed it
-- to succeed (their own children follow, through this same trigger), and count it off the others,
-- which become queued (and wake their workers) when it was their last. Runs in the finishing
-- transaction, whoever finishes the job: a worker's acknowledgement or rescue, pgq.cancel, a DBA.
-- SECURITY DEFINER: cancelling a child is an administrator's transition (revision 0002's guard),
-- which a worker finishing the parent may not make on its own rights.
-- pgq:function jobs_release_dependents

-- The WHEN clause is plain column tests, evaluated without a function call: jobs nobody depends on
-- (has_dependents NULL) never run the function.
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_release_dependents();


-- Why jobs wait: one row per waiting job and parent it still waits for.
CREATE VIEW pgq.waiting_jobs AS
SELECT c.id, c.queue, c.kind, c.pending_parents, d.parent_id, p.kind AS parent_kind,
       p.status AS parent_status, d.needs_success, c.created_at, now() - c.created_at AS waiting_for
FROM pgq.job_dependencies d
JOIN pgq.jobs c ON c.id = d.job_id
LEFT JOIN pgq.jobs p ON p.id = d.parent_id
WHERE d.parent_outcome IS NULL AND c.status::text = 'waiting';
COMMENT ON VIEW pgq.waiting_jobs IS
    'Jobs waiting for parents: one row per (waiting job, parent not finished yet), with the parent''s '
    'kind and status (NULL: the parent was deleted) and how long the job has waited.';


-- Cancel and await now take waiting jobs too. Same signatures; bodies replaced.
-- pgq:function cancel

-- pgq:function mark_awaited


-- The SQL API gains depends_on and on_parent_failure (at the end, with defaults: existing calls keep
-- working). A new signature is a new function, so the old one is dropped; its EXECUTE grants are
-- carried over to the new one first.
-- pgq:function enqueue
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text)
    FROM PUBLIC;
DO $grants$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, '
                       'bigint, integer, bigint[], text), pgq.enqueue_after(text[], jsonb[], text[], smallint[], '
                       'timestamptz[], double precision[], integer[], boolean[], integer[], bigint[]) TO %s', grantee);
    END LOOP;
END;
$grants$;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer);


-- queue_stats gains the count of waiting jobs (at the end: columns may only be added there).
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
                              AND j.status = 'succeeded')                          AS succeeded_last_minute,
           count(*) FILTER (WHERE j.status::text = 'waiting')                      AS waiting
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
       p.paused_at,
       coalesce(c.waiting, 0) AS waiting
FROM counted c
FULL JOIN pgq.paused_queues p ON p.queue = c.queue;
COMMENT ON VIEW pgq.queue_stats IS
    'Per queue: ready, scheduled (run_at in the future), running, expired leases, finished counts, '
    'age of the oldest ready job, jobs that succeeded in the last minute, whether the queue is '
    'paused (since when), and jobs waiting for parents. Scans pgq.jobs.';


-- Waiting jobs, per queue, without reading the others: the dashboard's overview counts them
-- (sql/dashboard_queues.sql) as it counts queued jobs through jobs_claim_idx. Plain jobs never enter
-- this index. Its predicate names every other status instead of 'waiting', which this transaction
-- added and so may not use (see the top of this file); the planner proves that `status = 'waiting'`
-- implies it, so queries just say that.
CREATE INDEX jobs_waiting_idx ON pgq.jobs (queue)
    WHERE status <> ALL (ARRAY['queued', 'running', 'succeeded', 'failed', 'cancelled']::pgq.job_status[]);
