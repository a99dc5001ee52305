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
CREATE FUNCTION pgq.worker_live(last_seen timestamptz, refresh_s double precision)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$ SELECT last_seen > now() - make_interval(secs => 3 * refresh_s) $fn$;
COMMENT ON FUNCTION pgq.worker_live(timestamptz, double precision) IS
    'Whether a pgq.workers row (its last_seen and refresh_s) belongs to a live worker.';

CREATE FUNCTION pgq.worker_register(p_claimed_by text, p_host text, p_pid integer, p_queues text[],
                                    p_kinds text[], p_slots integer, p_lease_s double precision,
                                    p_refresh_s double precision, p_version text)
RETURNS TABLE (id uuid, token uuid)
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO pgq.workers AS w (claimed_by, host, pid, queues, kinds, slots, lease_s, refresh_s, version)
    VALUES (p_claimed_by, p_host, p_pid, p_queues, coalesce(p_kinds, '{}'), p_slots, p_lease_s, p_refresh_s,
            p_version)
    RETURNING w.id, w.token
$fn$;
COMMENT ON FUNCTION pgq.worker_register(text, text, integer, text[], text[], integer, double precision,
                                        double precision, text) IS
    'Add a worker to pgq.workers; returns its id and the secret token its later calls present.';

-- Refresh (and set the state of) the caller's own row: true when it exists, false when it was pruned
-- meanwhile (the worker then registers again).
CREATE FUNCTION pgq.worker_seen(p_id uuid, p_token uuid, p_state text)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH seen AS (
        UPDATE pgq.workers w SET last_seen = now(), state = coalesce(p_state, w.state)
        WHERE w.id = p_id AND w.token = p_token
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM seen)
$fn$;
COMMENT ON FUNCTION pgq.worker_seen(uuid, uuid, text) IS
    'Refresh last_seen (and state, unless NULL) of the worker row with this id and token; false if none.';

CREATE FUNCTION pgq.worker_unregister(p_id uuid, p_token uuid)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH gone AS (DELETE FROM pgq.workers w WHERE w.id = p_id AND w.token = p_token RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$fn$;
COMMENT ON FUNCTION pgq.worker_unregister(uuid, uuid) IS
    'Delete the worker row with this id and token (a clean stop); false if none.';

-- Rows that missed every refresh for three leases (and three refresh periods): their worker is gone.
-- Locked in id order, skipping a row a worker is refreshing right now (it is not stale then).
CREATE FUNCTION pgq.worker_prune()
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH stale AS (
        SELECT w.id FROM pgq.workers w
        WHERE w.last_seen < now() - make_interval(secs => 3 * greatest(w.lease_s, w.refresh_s))
        ORDER BY w.id
        FOR UPDATE SKIP LOCKED
    ),
    gone AS (DELETE FROM pgq.workers w USING stale s WHERE w.id = s.id RETURNING 1)
    SELECT count(*)::integer FROM gone
$fn$;
COMMENT ON FUNCTION pgq.worker_prune() IS
    'Delete the rows of pgq.workers not refreshed for three leases; returns how many.';

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
CREATE FUNCTION pgq.explain(p_job_id bigint)
RETURNS TABLE (reason text, detail text, facts jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
WITH job AS (
    -- status as text: the enum's value 'waiting' is new in this transaction when the migrations run
    -- in one (revision 0007 adds it), and a body may not name it as an enum literal then.
    SELECT j.id, j.queue, j.kind, j.status::text AS status, j.run_at, j.priority, j.pending_parents, j.attempts,
           j.max_attempts, j.last_error, j.finished_at, j.claimed_by, j.started_at, j.lease_expires_at
    FROM pgq.jobs j
    WHERE j.id = p_job_id
),
active AS (
    SELECT * FROM job a WHERE a.status IN ('queued', 'waiting')
),
serving AS (
    SELECT w.claimed_by, w.kinds
    FROM pgq.workers w, active a
    WHERE w.state = 'running' AND pgq.worker_live(w.last_seen, w.refresh_s)
      AND (w.queues IS NULL OR a.queue = ANY(w.queues))
),
blockers AS (
    SELECT 1 AS ord, 'finished' AS reason,
           format('finished: %s at %s after %s attempt(s)%s', j.status, j.finished_at, j.attempts,
                  CASE WHEN j.last_error IS NOT NULL THEN ': ' || split_part(j.last_error, E'\n', 1) ELSE '' END)
               AS detail,
           jsonb_build_object('status', j.status, 'finished_at', j.finished_at, 'attempts', j.attempts,
                              'last_error', j.last_error) AS facts
    FROM job j WHERE j.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 2, 'running', format('running on %s since %s (lease until %s)', j.claimed_by, j.started_at,
                                j.lease_expires_at),
           jsonb_build_object('claimed_by', j.claimed_by, 'started_at', j.started_at,
                              'lease_expires_at', j.lease_expires_at, 'attempts', j.attempts)
    FROM job j WHERE j.status = 'running'
    UNION ALL
    SELECT 3, 'scheduled', format('scheduled for %s', a.run_at), jsonb_build_object('run_at', a.run_at)
    FROM active a WHERE a.run_at > now()
    UNION ALL
    SELECT 4, 'waiting_for_parents',
           format('waits for parent(s) %s', array_to_string(p.ids, ', ')),
           jsonb_build_object('parents', to_jsonb(p.ids), 'pending_parents', a.pending_parents)
    FROM active a
    CROSS JOIN LATERAL (SELECT coalesce(array_agg(d.parent_id ORDER BY d.parent_id), '{}') AS ids
                        FROM pgq.job_dependencies d
                        WHERE d.job_id = a.id AND d.parent_outcome IS NULL) p
    WHERE a.status = 'waiting'
    UNION ALL
    SELECT 5, 'queue_paused', format('queue %s is paused (by %s since %s)', p.queue, p.paused_by, p.paused_at),
           jsonb_build_object('queue', p.queue, 'paused_by', p.paused_by, 'paused_at', p.paused_at)
    FROM active a JOIN pgq.paused_queues p ON p.queue = a.queue
    UNION ALL
    SELECT 6, 'concurrency_limit_full',
           format('concurrency limit of %s is full: %s of %s running (jobs %s)', c.kind, h.n, c.max_running,
                  array_to_string(h.ids, ', ')),
           jsonb_build_object('kind', c.kind, 'max_running', c.max_running, 'running', h.n,
                              'holders', to_jsonb(h.ids))
    FROM active a
    JOIN pgq.concurrency_limits c ON c.kind = a.kind
    CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce((array_agg(r.id ORDER BY r.id))[1:20], '{}') AS ids
                        FROM pgq.jobs r WHERE r.status = 'running' AND r.kind = a.kind) h
    WHERE h.n >= c.max_running
    UNION ALL
    -- The window has room again once enough of its oldest starts left it: `until` is when the
    -- start that brings the count below max_starts leaves (at + per_s).
    SELECT 7, 'rate_limit_full',
           format('rate limit of %s (%s per %s s) is full until %s', r.kind, r.max_starts, r.per_s, s.until),
           jsonb_build_object('kind', r.kind, 'max_starts', r.max_starts, 'per_s', r.per_s, 'starts', s.total,
                              'until', s.until)
    FROM active a
    JOIN pgq.rate_limits r ON r.kind = a.kind
    CROSS JOIN LATERAL (
        SELECT max(x.total) AS total,
               min(x.at + make_interval(secs => r.per_s)) FILTER (WHERE x.cum >= x.total - r.max_starts + 1) AS until
        FROM (SELECT st.at, sum(st.starts) OVER (ORDER BY st.at ROWS UNBOUNDED PRECEDING) AS cum,
                     sum(st.starts) OVER () AS total
              FROM pgq.rate_limit_starts st
              WHERE st.kind = a.kind AND st.at > now() - make_interval(secs => r.per_s)) x
    ) s
    WHERE s.total >= r.max_starts
    UNION ALL
    SELECT 8, 'no_live_worker', format('no live worker claims from queue %s', a.queue),
           jsonb_build_object('queue', a.queue)
    FROM active a WHERE NOT EXISTS (SELECT 1 FROM serving)
    UNION ALL
    SELECT 9, 'unknown_kind',
           format('no live worker claiming from queue %s knows kind %s (workers there: %s)', a.queue, a.kind,
                  (SELECT string_agg(s.claimed_by, ', ' ORDER BY s.claimed_by) FROM serving s)),
           jsonb_build_object('queue', a.queue, 'kind', a.kind,
                              'workers', (SELECT jsonb_agg(s.claimed_by ORDER BY s.claimed_by) FROM serving s))
    FROM active a
    WHERE EXISTS (SELECT 1 FROM serving) AND NOT EXISTS (SELECT 1 FROM serving s WHERE a.kind = ANY(s.kinds))
)
SELECT b.reason, b.detail, b.facts
FROM (SELECT * FROM blockers
      UNION ALL
      -- Claim order within the queue: priority, run_at, id (jobs_claim_idx).
      SELECT 10, 'ready', format('ready: position %s in queue %s', pos.n + 1, a.queue),
             jsonb_build_object('queue', a.queue, 'position', pos.n + 1)
      FROM active a
      CROSS JOIN LATERAL (SELECT count(*) AS n FROM pgq.jobs o
                          WHERE o.status = 'queued' AND o.queue = a.queue AND o.run_at <= now()
                            AND (o.priority, o.run_at, o.id) < (a.priority, a.run_at, a.id)) pos
      WHERE a.status = 'queued' AND a.run_at <= now() AND NOT EXISTS (SELECT 1 FROM blockers)) b
ORDER BY b.ord
$fn$;
COMMENT ON FUNCTION pgq.explain(bigint) IS
    'Why job p_job_id is not running now: one row per reason (finished, running, scheduled, '
    'waiting_for_parents, queue_paused, concurrency_limit_full, rate_limit_full, no_live_worker, '
    'unknown_kind) with its facts, or ready with its position in the queue; no row: no such job.';


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
