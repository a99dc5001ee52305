-- pgq schema, revision 0013: operating many jobs.
--
-- 1. A registry of live workers. Until now pgq.workers was a view of the running jobs grouped by
--    claimed_by, so an idle worker was invisible and nothing could say "no worker serves this
--    queue". It becomes a table: each worker writes its row at start, refreshes last_seen with the
--    maintenance run it does anyway (sql/maintenance_lock_seen.sql: the same statement, no extra
--    round trip), marks it draining when it stops claiming, and deletes it on a clean stop. The rescue
--    leader prunes rows that stopped refreshing for three leases (a worker killed with SIGKILL).
--    pgq_worker writes only through the SECURITY DEFINER functions below, each fenced by the row's
--    secret token (a column the other roles cannot read): a worker cannot forge, refresh or delete
--    another worker's row, and a producer cannot write the table at all.
-- 3. pgq.job_audit: who changed which jobs by a bulk action (Queue.cancel_where, retry_where,
--    delete_where; `pgq jobs cancel|retry|delete` with filters; the dashboard's bulk actions): one row
--    per batch, written in the batch's transaction, with the ids of the jobs it changed.
-- 2. pgq.explain(id): why a job is not running now, each reason with its facts, read in one
--    statement (one snapshot); Queue.explain, `pgq jobs explain`, the dashboard and a DBA in psql all
--    read it.

-- The old view pgq.workers (workers holding jobs, grouped from the running jobs) keeps its
-- definition under the name pgq.busy_workers; pgq.workers becomes the registry.
DROP VIEW pgq.workers;
CREATE VIEW pgq.busy_workers AS
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
COMMENT ON VIEW pgq.busy_workers IS
    'Per worker (claimed_by) holding jobs now: how many it runs, how many of their leases expired (all of '
    'them: the worker is probably gone), its queues and kinds, its longest-running job. Reads running jobs '
    'only (jobs_running_idx). pgq.running_jobs lists the jobs themselves; pgq.workers is the registry of '
    'every live worker, idle ones included.';


CREATE TABLE pgq.workers (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token      uuid NOT NULL DEFAULT gen_random_uuid(),
    claimed_by text NOT NULL,
    host       text NOT NULL,
    pid        integer NOT NULL,
    queues     text[],
    kinds      text[] NOT NULL,
    slots      integer NOT NULL CHECK (slots >= 1),
    lease_s    double precision NOT NULL CHECK (lease_s > 0),
    refresh_s  double precision NOT NULL CHECK (refresh_s > 0),
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    version    text NOT NULL,
    state      text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'draining')),
    role       text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE pgq.workers IS
    'The worker registry: one row per worker process, written at its start, refreshed every refresh_s '
    'seconds (with its maintenance run), deleted on a clean stop. A row is live while pgq.worker_live() '
    'says so; rows stale for three leases are pruned by the rescue. Written only through pgq.worker_* '
    'functions, each fenced by the row''s token.';
COMMENT ON COLUMN pgq.workers.id IS 'The worker''s registry id (public).';
COMMENT ON COLUMN pgq.workers.token IS 'Secret of the worker that owns the row; no pgq role but the admin may read it.';
COMMENT ON COLUMN pgq.workers.claimed_by IS 'The worker''s name, as in pgq.jobs.claimed_by of its jobs.';
COMMENT ON COLUMN pgq.workers.host IS 'Host name of the worker''s machine.';
COMMENT ON COLUMN pgq.workers.pid IS 'Process id on that host.';
COMMENT ON COLUMN pgq.workers.queues IS 'Queues it claims from; NULL: every queue.';
COMMENT ON COLUMN pgq.workers.kinds IS 'Kinds it has a handler for (its App''s tasks).';
COMMENT ON COLUMN pgq.workers.slots IS 'How many jobs it runs at once (its concurrency).';
COMMENT ON COLUMN pgq.workers.lease_s IS 'Lease of its attempts, in seconds.';
COMMENT ON COLUMN pgq.workers.refresh_s IS 'Seconds between the refreshes of last_seen.';
COMMENT ON COLUMN pgq.workers.started_at IS 'When it registered (database clock).';
COMMENT ON COLUMN pgq.workers.last_seen IS 'Its last refresh (database clock).';
COMMENT ON COLUMN pgq.workers.version IS 'pgq version it runs.';
COMMENT ON COLUMN pgq.workers.state IS 'running (claims jobs) or draining (stopping: finishes its jobs, claims no more).';
COMMENT ON COLUMN pgq.workers.role IS 'The database role (session_user) that registered it.';

-- Live: refreshed within three refresh periods (a refresh is due every refresh_s, jittered by 10 %;
-- two missed refreshes are a slow database, three a dead worker). SQL and STABLE: inlined.
-- pgq:function worker_live

-- pgq:function worker_register

-- Refresh (and set the state of) the caller's own row: true when it exists, false when it was pruned
-- meanwhile (the worker then registers again).
-- pgq:function worker_seen

-- pgq:function worker_unregister

-- Rows that missed every refresh for three leases (and three refresh periods): their worker is gone.
-- Locked in id order, skipping a row a worker is refreshing right now (it is not stale then).
-- pgq:function worker_prune

REVOKE EXECUTE ON FUNCTION
    pgq.worker_register(text, text, integer, text[], text[], integer, double precision, double precision, text),
    pgq.worker_seen(uuid, uuid, text),
    pgq.worker_unregister(uuid, uuid),
    pgq.worker_prune()
    FROM PUBLIC;


-- Why job `p_job_id` is not running now: one row per reason, in a fixed order, each a code, a sentence
-- and its facts (jsonb). No row: there is no such job. The reasons:
--   finished                 it succeeded, failed or was cancelled (status, finished_at, attempts, last_error)
--   running                  it runs (claimed_by, started_at, lease_expires_at)
--   scheduled                run_at is in the future
--   waiting_for_parents      it waits for these unfinished parents
--   queue_paused             its queue is paused (by whom, since when)
--   concurrency_limit_full   its kind's concurrency limit is full (the running jobs holding it)
--   rate_limit_full          its kind's rate window is full until `until`
--   no_live_worker           no live worker (state running) claims from its queue
--   unknown_kind             live workers claim from its queue, but none has a handler for its kind
--   ready                    none of the above: claimable now, `position` in its queue's claim order
--                            (1: the next one a worker takes, priority, run_at, id)
-- HOOK(sequences): the fairness issue's "a sequence is held by job N" reason belongs in `blockers`,
-- as one more branch with the code 'sequence_held' (and so it also keeps 'ready' out).
-- One SQL statement, STABLE: every part reads the same snapshot. It reads through the caller's
-- rights (SECURITY INVOKER): whoever may read pgq's tables (every pgq role) may explain.
-- pgq:function explain


CREATE TABLE pgq.job_audit (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    action   text NOT NULL CHECK (action IN ('cancel', 'retry', 'delete')),
    actor    text,
    db_role  text NOT NULL DEFAULT session_user,
    filters  jsonb NOT NULL DEFAULT '{}',
    job_ids  bigint[] NOT NULL
);
-- The audit of one job: WHERE job_ids @> ARRAY[42::bigint].
CREATE INDEX job_audit_job_ids_idx ON pgq.job_audit USING gin (job_ids);
COMMENT ON TABLE pgq.job_audit IS
    'Bulk actions on jobs: one row per batch (its own transaction), with the jobs it changed. The jobs of '
    'a deleted batch are gone; their ids stay here.';
COMMENT ON COLUMN pgq.job_audit.id IS 'Row id.';
COMMENT ON COLUMN pgq.job_audit.at IS 'When the batch ran (database clock).';
COMMENT ON COLUMN pgq.job_audit.action IS 'cancel, retry or delete.';
COMMENT ON COLUMN pgq.job_audit.actor IS 'Who asked, when known: the dashboard''s user; NULL from the API and CLI (see db_role).';
COMMENT ON COLUMN pgq.job_audit.db_role IS 'The database role that ran it (session_user).';
COMMENT ON COLUMN pgq.job_audit.filters IS 'The filters the jobs were selected by.';
COMMENT ON COLUMN pgq.job_audit.job_ids IS 'Ids of the jobs this batch changed.';
