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
CREATE FUNCTION pgq.enqueue_after(
    kinds          text[],
    payloads       jsonb[],
    queues         text[],
    priorities     smallint[],
    run_ats        timestamptz[],
    delays         double precision[],
    max_attempts   integer[],
    run_on_failure boolean[],
    edge_jobs      integer[],
    edge_parents   bigint[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    missing bigint;
BEGIN
    IF cardinality(edge_jobs) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'pgq.enqueue_after: edge_jobs and edge_parents differ in length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM pgq.jobs j
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j;
    SELECT p INTO missing FROM unnest(edge_parents) AS p
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = p) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: there is no job % (never enqueued, or purged)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- Unfinished parents learn that their finish matters (the release trigger's WHEN clause).
    UPDATE pgq.jobs j SET has_dependents = true
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
      AND j.status IN ('waiting', 'queued', 'running') AND j.has_dependents IS NOT TRUE;

    RETURN QUERY
    WITH input AS (
        SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, now() + make_interval(secs => i.delay), now()) AS run_at,
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure, ord)
    ),
    edges AS (
        SELECT DISTINCT e.ord, e.parent_id, p.status AS parent_status
        FROM unnest(edge_jobs, edge_parents) AS e(ord, parent_id)
        JOIN pgq.jobs p ON p.id = e.parent_id
    ),
    state AS (
        SELECT u.ord,
               count(e.parent_id) FILTER (WHERE e.parent_status IN ('waiting', 'queued', 'running')) AS pending,
               min(e.parent_id) FILTER (WHERE e.parent_status IN ('failed', 'cancelled')
                                          AND NOT u.run_on_failure) AS doomed_by
        FROM input u
        LEFT JOIN edges e ON e.ord = u.ord
        GROUP BY u.ord
    ),
    ins AS (
        INSERT INTO pgq.jobs (id, kind, payload, queue, priority, run_at, max_attempts, status,
                              pending_parents, finished_at, last_error)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END
        FROM input u JOIN state s ON s.ord = u.ord
        ORDER BY u.ord
        RETURNING pgq.jobs.id, pgq.jobs.queue, pgq.jobs.status
    ),
    deps AS (
        INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome)
        SELECT u.id, e.parent_id, NOT u.run_on_failure,
               CASE WHEN e.parent_status IN ('succeeded', 'failed', 'cancelled') THEN e.parent_status END
        FROM edges e JOIN input u ON u.ord = e.ord
    ),
    woke AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM ins r WHERE r.status = 'queued') q
    )
    SELECT u.ord, u.id FROM input u, woke ORDER BY u.ord;
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies.';


-- A parent finished: record its outcome on its dependency rows, cancel the children that needed it
-- to succeed (their own children follow, through this same trigger), and count it off the others,
-- which become queued (and wake their workers) when it was their last. Runs in the finishing
-- transaction, whoever finishes the job: a worker's acknowledgement or rescue, pgq.cancel, a DBA.
-- SECURITY DEFINER: cancelling a child is an administrator's transition (revision 0002's guard),
-- which a worker finishing the parent may not make on its own rights.
CREATE FUNCTION pgq.jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    doomed bigint[];
    released bigint[];
    woke bigint;
BEGIN
    WITH marked AS (
        UPDATE pgq.job_dependencies d SET parent_outcome = NEW.status
        WHERE d.parent_id = NEW.id AND d.parent_outcome IS NULL
        RETURNING d.job_id, d.needs_success
    )
    SELECT array_agg(m.job_id ORDER BY m.job_id) FILTER (WHERE m.needs_success AND NEW.status <> 'succeeded'),
           array_agg(m.job_id ORDER BY m.job_id) FILTER (WHERE NOT (m.needs_success AND NEW.status <> 'succeeded'))
    INTO doomed, released
    FROM marked m;

    IF doomed IS NOT NULL THEN
        UPDATE pgq.jobs c
        SET status = 'cancelled',
            pending_parents = c.pending_parents - 1,
            finished_at = now(),
            last_error = format('parent job %s %s', NEW.id, NEW.status)
        WHERE c.id = ANY(doomed) AND c.status = 'waiting';
    END IF;
    IF released IS NOT NULL THEN
        WITH ready AS (
            UPDATE pgq.jobs c
            SET pending_parents = c.pending_parents - 1,
                status = CASE WHEN c.pending_parents <= 1 THEN 'queued' ELSE 'waiting' END::pgq.job_status,
                run_at = CASE WHEN c.pending_parents <= 1 THEN greatest(c.run_at, now()) ELSE c.run_at END
            WHERE c.id = ANY(released) AND c.status = 'waiting'
            RETURNING c.queue, c.status
        )
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END))
        INTO woke
        FROM (SELECT DISTINCT r.queue FROM ready r WHERE r.status = 'queued') q;
    END IF;
    RETURN NULL;
END;
$fn$;
COMMENT ON FUNCTION pgq.jobs_release_dependents() IS
    'Trigger of pgq.jobs: a job with dependents that finishes releases them (counts itself off their '
    'pending_parents) or cancels those that needed it to succeed.';

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
CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET status = 'cancelled',
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = now()
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running')
    RETURNING j.*;
$fn$;

CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET awaited = true
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running') AND j.awaited IS NOT TRUE
    RETURNING j.*;
$fn$;


-- The SQL API gains depends_on and on_parent_failure (at the end, with defaults: existing calls keep
-- working). A new signature is a new function, so the old one is dropped; its EXECUTE grants are
-- carried over to the new one first.
CREATE FUNCTION pgq.enqueue(
    kind              text,
    payload           jsonb DEFAULT '{}',
    queue             text DEFAULT 'default',
    priority          integer DEFAULT 0,
    run_at            timestamptz DEFAULT NULL,
    dedupe_key        text DEFAULT NULL,
    watermark         bigint DEFAULT NULL,
    max_attempts      integer DEFAULT NULL,
    depends_on        bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel'
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF on_parent_failure IS NULL OR on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'', got %', coalesce(on_parent_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF depends_on IS NULL THEN
        RETURN (SELECT e.id FROM pgq.enqueue_many(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with dedupe_key or watermark'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[cardinality(depends_on)]), depends_on) AS e);
END;
$fn$;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback).';
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
