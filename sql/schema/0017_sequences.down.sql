-- Revision 0017 down: no sequences. Revision 0014's pgq.enqueue_after and SQL API, revision 0012's
-- release and cancel, revision 0016's settle and claim and revision 0013's explain, as they were (the
-- grants of the enqueue functions and the claim carried back).
--
-- Refused while a job waits on its sequence (an open sequence edge of a waiting job): without the
-- sequence edges' hold, a failed predecessor would release it, or the settle would. Cancel those
-- jobs, or let their sequences drain, then run it again. Finished jobs keep their sequence edges as
-- plain run-on-failure edges; the keys go.
DO $check$
DECLARE
    n bigint;
BEGIN
    SELECT count(DISTINCT d.job_id) INTO n
    FROM pgq.job_dependencies d JOIN pgq.jobs j ON j.id = d.job_id
    WHERE d.parent_outcome IS NULL AND d.sequence_hold IS NOT NULL AND j.status::text = 'waiting';
    IF n > 0 THEN
        RAISE EXCEPTION 'cannot downgrade below revision 0017: % jobs wait on their sequence', n
            USING ERRCODE = 'object_in_use',
                  HINT = 'cancel them (or let their sequences run), then downgrade again';
    END IF;
END
$check$;

CREATE TEMP TABLE pgq_0017_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[], text[], boolean[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text, text, text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text,
                          text);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[], text[], boolean[]);

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
    edge_parents   bigint[],
    group_keys     text[] DEFAULT NULL
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
    -- The parents: FOR KEY SHARE, which no UPDATE waits for, and no write to them (revision 0012).
    PERFORM 1 FROM pgq.jobs j
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
    ORDER BY j.id
    FOR KEY SHARE OF j;
    SELECT p INTO missing FROM unnest(edge_parents) AS p
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = p) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: there is no job % (never enqueued, or purged)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN QUERY
    WITH input AS (
        SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()) AS run_at,
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure,
               i.group_key
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure, group_keys)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure,
                                  group_key, ord)
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
                              pending_parents, finished_at, last_error, limited, group_key)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END,
               u.group_key IS NOT NULL
               OR u.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r),
               u.group_key
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
                                             integer[], boolean[], integer[], bigint[], text[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[], text[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies. '
    'group_keys: each job''s group (NULL: none).';

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
    on_parent_failure text DEFAULT 'cancel',
    group_key         text DEFAULT NULL
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
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts],
            ARRAY[group_key]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with dedupe_key or watermark'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[cardinality(depends_on)]), depends_on, ARRAY[group_key]) AS e);
END;
$fn$;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback); '
    'group_key: the job''s group (per-group limits, fair claiming).';
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pgq.release_children(finished bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents   bigint[];
    kids      bigint[];
    counts    integer[];
    dooms     bigint[];
    cancelled bigint[] := '{}';
    level     bigint[];
    woke      bigint;
    outermost boolean := false;
BEGIN
    -- Driven by the open edges of the given ids, each parent's status read by its key (a join could
    -- start from the index of every finished job).
    parents := ARRAY(SELECT e.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     ORDER BY e.parent_id);
    IF cardinality(parents) = 0 THEN
        RETURN cancelled;
    END IF;

    IF coalesce(current_setting('pgq.cascade_locked', true), '') <> 'on' THEN
        outermost := true;
        -- The waiting children of the parents and of every job a cascade will cancel (reached from a
        -- failed or cancelled parent through edges that need it to succeed), in id order.
        PERFORM 1 FROM pgq.jobs c
        WHERE c.id IN (
            WITH RECURSIVE doomed(id) AS (
                SELECT p.id FROM pgq.jobs p
                WHERE p.id = ANY(parents) AND p.status IN ('failed', 'cancelled')
              UNION
                SELECT d.job_id
                FROM doomed x
                JOIN pgq.job_dependencies d ON d.parent_id = x.id AND d.parent_outcome IS NULL AND d.needs_success
                JOIN pgq.jobs k ON k.id = d.job_id AND k.status = 'waiting'
            )
            SELECT d.job_id FROM pgq.job_dependencies d
            WHERE d.parent_outcome IS NULL
              AND (d.parent_id = ANY(parents) OR d.parent_id IN (SELECT x.id FROM doomed x))
        )
          AND c.status = 'waiting'
        ORDER BY c.id
        FOR NO KEY UPDATE OF c;
        -- Marks the rows held for the legacy trigger calls the updates below may fire, and for the
        -- levels of this loop.
        PERFORM set_config('pgq.cascade_locked', 'on', true);
    END IF;

    LOOP
        WITH marked AS (
            UPDATE pgq.job_dependencies d SET parent_outcome = p.status
            FROM pgq.jobs p
            WHERE d.parent_id = ANY(parents) AND d.parent_outcome IS NULL
              AND p.id = d.parent_id AND p.status IN ('succeeded', 'failed', 'cancelled')
            RETURNING d.job_id, d.parent_id, d.needs_success, p.status
        ),
        per_child AS (
            SELECT m.job_id, count(*)::integer AS n,
                   min(m.parent_id) FILTER (WHERE m.needs_success AND m.status <> 'succeeded') AS doomed_by
            FROM marked m
            GROUP BY m.job_id
        )
        SELECT array_agg(k.job_id ORDER BY k.job_id), array_agg(k.n ORDER BY k.job_id),
               array_agg(k.doomed_by ORDER BY k.job_id)
        INTO kids, counts, dooms
        FROM per_child k;
        EXIT WHEN kids IS NULL;

        -- Cancel those that needed a parent that did not succeed ...
        WITH gone AS (
            UPDATE pgq.jobs c
            SET status = 'cancelled',
                pending_parents = c.pending_parents - k.n,
                finished_at = now(),
                last_error = format('parent job %s %s', k.doomed_by,
                                    (SELECT p.status FROM pgq.jobs p WHERE p.id = k.doomed_by))
            FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
            WHERE c.id = k.id AND k.doomed_by IS NOT NULL AND c.status = 'waiting'
            RETURNING c.id
        )
        SELECT coalesce(array_agg(g.id ORDER BY g.id), '{}') INTO level FROM gone g;
        -- ... and count the finished parents off the others, which are queued (and wake their
        -- workers) when none is left.
        WITH ready AS (
            UPDATE pgq.jobs c
            SET pending_parents = c.pending_parents - k.n,
                status = CASE WHEN c.pending_parents <= k.n THEN 'queued' ELSE 'waiting' END::pgq.job_status,
                run_at = CASE WHEN c.pending_parents <= k.n THEN greatest(c.run_at, now()) ELSE c.run_at END
            FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
            WHERE c.id = k.id AND k.doomed_by IS NULL AND c.status = 'waiting'
            RETURNING c.queue, c.status
        )
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END))
        INTO woke
        FROM (SELECT DISTINCT r.queue FROM ready r WHERE r.status = 'queued') q;

        -- The cancelled children are finished parents in turn: the next level.
        cancelled := cancelled || level;
        parents := level;
        EXIT WHEN cardinality(parents) = 0;
    END LOOP;

    IF outermost THEN
        PERFORM set_config('pgq.cascade_locked', '', true);
    END IF;
    RETURN cancelled;
END;
$fn$;

CREATE OR REPLACE FUNCTION pgq.settle(lim integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents bigint[];
    waited  bigint[];
    told    bigint;
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        RAISE EXCEPTION 'pgq.settle: lim must be >= 1, got %', coalesce(lim::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One settle at a time (every worker runs it each second): the others have nothing to add.
    IF NOT pg_try_advisory_xact_lock(1885827428) THEN
        RETURN 0;
    END IF;
    parents := ARRAY(SELECT e.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     LIMIT lim);
    -- Waits of jobs that finished (or are gone: purged, deleted by hand).
    waited := ARRAY(SELECT a.job_id FROM pgq.awaited_jobs a
                    WHERE coalesce((SELECT j.status FROM pgq.jobs j WHERE j.id = a.job_id)
                                   NOT IN ('waiting', 'queued', 'running'), true)
                    ORDER BY a.job_id
                    LIMIT lim);
    PERFORM pgq.after_finish(parents || waited);
    -- A gone job's wait: nobody finishes it any more; tell its waiter (who reads it and finds it gone).
    WITH gone AS (
        DELETE FROM pgq.awaited_jobs a
        WHERE a.job_id = ANY(waited) AND NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = a.job_id)
        RETURNING a.job_id
    )
    SELECT count(pg_notify('pgq_finished', g.job_id::text)) INTO told FROM gone g;
    -- Revision 0016: the raises of keyed enqueues.
    RETURN cardinality(parents) + cardinality(waited) + pgq.settle_raises(lim);
END;
$fn$;

CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    PERFORM pgq.after_finish(ARRAY[job_id]);
END;
$fn$;
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel); its dependents '
    'that needed it to succeed are cancelled too, and its waiters told. Returns the job if cancelled.';

CREATE OR REPLACE FUNCTION pgq.explain(p_job_id bigint)
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

-- Revision 0016's claim, without the sequence key in its result.
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
CREATE FUNCTION pgq.claim(
    queues   text[],
    kinds    text[],
    lim      integer,
    lease_s  double precision,
    worker   text
) RETURNS TABLE (
    id bigint, queue text, kind text, payload jsonb, priority smallint, status text,
    run_at timestamptz, attempts integer, max_attempts integer, dedupe_key text, lease_token text,
    lease_expires_at timestamptz, claimed_by text, last_error text, result jsonb,
    input_watermark bigint, done_watermark bigint, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, progress jsonb, group_key text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its statements' estimated costs grow with the backlog: a server that compiles costly plans would
-- spend far longer compiling them than running them (see sql/transaction_guard.sql).
SET jit = off
-- One plan per statement and session (revision 0014). Every statement reads the index whose order
-- its ORDER BY names, whatever the parameters, so a custom plan is never better; but PL/pgSQL kept
-- replanning the statements of the limited path on every call (their generic plans cost more on
-- paper), which cost a claim of a limited kind behind a full window 2.5 ms instead of 1.0.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    wanted      text[];     -- queues to claim from, paused ones left out
    limited_kinds text[];   -- kinds that have a concurrency or rate limit
    any_limited boolean;    -- a queued job of the wanted queues is marked limited
    q           text;
    found_ids   bigint[] := '{}';   -- reserved unlimited candidates
    found_tids  tid[] := '{}';      -- and where they are (ctid)
    l_tids      tid[] := '{}';
    unmarked    bigint[];           -- candidates of limited kinds not marked yet
    kinds_here  text[] := '{}';     -- limited kinds with queued jobs in the wanted queues
    l_kinds     text[];
    l_max       integer[];
    l_starts    integer[];
    l_per       double precision[];
    loose       text[];             -- marked kinds that no longer have any limit
    k_free      integer[];          -- free slots of each locked kind: l_kinds', then w_kinds'
    w_kinds     text[] := '{}';     -- locked kinds claimed by the walk over their groups, and their limits
    w_max       integer[];
    w_starts    integer[];
    w_per       double precision[];
    w_grouped   boolean[];          -- the kind has a group_limits row (locked)
    w_gmax      integer[];
    w_gstarts   integer[];
    w_gper      double precision[];
    w_turn      text[];
    wi          integer;
    level       integer;            -- the priority the walk takes jobs of
    used_keys   text[] := '{}';     -- groups of the walk that got jobs at a better priority, and how many
    used_n      integer[] := '{}';
    si          integer;
    w_phase     integer;
    budget      integer;            -- what the walk of a kind may reserve
    w_got       integer;            -- and has reserved
    seg_keys    text[];             -- the groups one statement of the walk reserved a job of
    seg_free    integer[];          -- and the room each had
    g_ids       bigint[];
    last_served text;
    spare_keys  text[];             -- groups of the walk with room for more, and how many
    spare_n     integer[];
    fair_tids   tid[];
    l_ids       bigint[] := '{}';   -- reserved candidates of limited kinds, within their limits
    at_ts       timestamptz;
    tried       bigint[] := '{}';   -- every row reserved so far
    taken       integer := 0;       -- rows claimed so far
    got         integer;
    pass_no     integer := 0;
    a_got       bigint;             -- rows the first scan of (a) reserved in a queue (see there)
    a_first     bigint;             -- the first of them in claim order
    a_head      bigint;             -- and the queue's first ready row
    b_examine   integer;            -- rows of the head the second scan reads
    b_cap       integer;            -- and busy rows it tries
    busy_age    integer;            -- age() of a snapshot's xmin (see (a))
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        RAISE EXCEPTION 'pgq.claim: lim must be >= 1, got %', coalesce(lim::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lease_s IS NULL OR NOT lease_s > 0 THEN
        RAISE EXCEPTION 'pgq.claim: lease_s must be > 0, got %', coalesce(lease_s::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF worker IS NULL OR worker = '' THEN
        RAISE EXCEPTION 'pgq.claim: worker must be a non-empty text' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The queues: the given ones, or every queue with queued jobs (a loose index scan of
    -- jobs_claim_idx, one probe per queue); paused ones left out. Exact: pgq.pause() waits for every
    -- transaction that read pgq.paused_queues (ACCESS EXCLUSIVE), this one included.
    WITH RECURSIVE every_queue AS (
        (SELECT j.queue FROM pgq.jobs j WHERE queues IS NULL AND j.status = 'queued' ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM pgq.jobs j WHERE j.status = 'queued' AND j.queue > e.queue
                ORDER BY j.queue LIMIT 1)
        FROM every_queue e
        WHERE e.queue IS NOT NULL
    )
    SELECT ARRAY(
        SELECT w.name
        FROM (SELECT DISTINCT g.name FROM unnest(queues) AS g(name) WHERE g.name IS NOT NULL
              UNION
              SELECT e.queue FROM every_queue e WHERE e.queue IS NOT NULL) w
        WHERE NOT EXISTS (SELECT 1 FROM pgq.paused_queues p WHERE p.queue = w.name)
        ORDER BY w.name),
        ARRAY(SELECT c.kind FROM pgq.concurrency_limits c UNION SELECT r.kind FROM pgq.rate_limits r)
    INTO wanted, limited_kinds;
    IF cardinality(wanted) = 0 THEN
        RETURN;
    END IF;

    -- Reservations are entries of PostgreSQL's shared lock table, which is finite: at most 256.
    lim := least(lim, 256);

    -- Rounds of reserve and take: a row reserved from a snapshot older than another claim's commit
    -- may be gone by the take; then (at most twice) this claim reserves again for what it lost.
    LOOP
    pass_no := pass_no + 1;
    found_ids := '{}';
    found_tids := '{}';
    -- (a) Unlimited work: per queue, the head of jobs_claim_idx (limited = false) in claim order,
    -- each row reserved or skipped; stops after `lim` reservations.
    -- Each row is kept by id and by its place in the table (ctid): the take reads it there, with no
    -- index probe.
    -- A row whose version the scan reads has an xmax newer than the xmin of a snapshot taken just
    -- before (busy_age: age() counts from a point fixed for the transaction) is busy: a transaction that may still run has taken it (most often another claim, not yet
    -- committed: a reservation would fail), or has just taken it and committed (the take would find
    -- it gone). With many claimers, busy rows are most of the queue's head, and each try is an entry
    -- of PostgreSQL's shared lock table (LWLock:LockManager). So the first scan reserves only rows
    -- that are not busy. When it did not start at the queue's head (other claimers are at work
    -- there), a second scan tries the first two busy rows among the head's first `lim` rows; when it
    -- came up short, every busy row. (A producer holding rows FOR KEY SHARE, pgq.enqueue_after in a
    -- transaction left open, makes them busy without keeping them from a claim: they are still
    -- tried, at the latest once they reach the head.) An xmax older than that xmin (a claim that
    -- rolled back, a committed KEY SHARE) does not make a row busy; one that is a MultiXactId
    -- compares at random, which only decides in which scan it is tried. Plain ordered scans, each
    -- with its LIMIT: a window counting busy rows over the scan got a generic plan that sorted the
    -- whole queue.
    busy_age := age((pg_snapshot_xmin(pg_current_snapshot())::text::bigint % 4294967296)::text::xid);
    FOREACH q IN ARRAY wanted LOOP
        SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}'),
               count(*), (array_agg(r.id ORDER BY r.priority, r.run_at, r.id))[1],
               (SELECT h.id FROM pgq.jobs h
                WHERE h.status = 'queued' AND h.queue = q AND h.limited = false AND h.run_at <= now()
                  AND (kinds IS NULL OR h.kind = ANY(kinds))
                ORDER BY h.priority, h.run_at, h.id
                LIMIT 1)
        INTO found_ids, found_tids, a_got, a_first, a_head
        FROM (SELECT c.id, c.ctid, c.priority, c.run_at
              FROM (SELECT j.id, j.ctid, j.priority, j.run_at,
                           j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                    FROM pgq.jobs j
                    WHERE j.status = 'queued' AND j.queue = q AND j.limited = false AND j.run_at <= now()
                      AND (kinds IS NULL OR j.kind = ANY(kinds))
                    ORDER BY j.priority, j.run_at, j.id
                    OFFSET 0) c  -- keeps the reservation below out of the scan's filter
              WHERE NOT c.busy AND c.id <> ALL(tried)
                AND pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
              LIMIT lim - taken) r;
        IF a_got < lim - taken THEN
            b_examine := NULL;  -- short: every busy row of the queue
            b_cap := NULL;
        ELSIF a_first IS DISTINCT FROM a_head THEN
            b_examine := lim - taken;
            b_cap := 2;
        ELSE
            CONTINUE;
        END IF;
        SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}')
        INTO found_ids, found_tids
        FROM (SELECT c.id, c.ctid
              FROM (SELECT x.id, x.ctid
                    FROM (SELECT j.id, j.ctid, j.priority, j.run_at,
                                 j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                          FROM pgq.jobs j
                          WHERE j.status = 'queued' AND j.queue = q AND j.limited = false AND j.run_at <= now()
                            AND (kinds IS NULL OR j.kind = ANY(kinds))
                          ORDER BY j.priority, j.run_at, j.id
                          LIMIT b_examine) x
                    WHERE x.busy AND x.id <> ALL(tried) AND x.id <> ALL(found_ids)
                    ORDER BY x.priority, x.run_at, x.id
                    LIMIT b_cap) c
              WHERE pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)) r;
    END LOOP;
    tried := tried || found_ids;

    -- Unmarked rows of limited kinds are marked (and leave jobs_claim_idx's unlimited part), never
    -- claimed as unlimited work. Rows another transaction holds are left for a later claim.
    IF cardinality(limited_kinds) > 0 AND cardinality(found_ids) > 0 THEN
        WITH marked AS (
            UPDATE pgq.jobs j SET limited = true
            WHERE j.id = ANY(ARRAY(SELECT x.id FROM pgq.jobs x
                                   WHERE x.id = ANY(found_ids) AND x.kind = ANY(limited_kinds) AND x.status = 'queued'
                                   ORDER BY x.id
                                   FOR NO KEY UPDATE SKIP LOCKED))
            RETURNING j.id
        )
        SELECT ARRAY(SELECT x.id FROM pgq.jobs x WHERE x.id = ANY(found_ids) AND x.kind = ANY(limited_kinds))
        INTO unmarked;
        IF cardinality(unmarked) > 0 THEN
            SELECT coalesce(array_agg(f.id), '{}'), coalesce(array_agg(f.tid), '{}')
            INTO found_ids, found_tids
            FROM unnest(found_ids, found_tids) AS f(id, tid)
            WHERE f.id <> ALL(unmarked);
        END IF;
    END IF;

    -- (b) Limited work, only when the wanted queues have any (one probe of jobs_claim_limited_idx per
    -- queue). The ORDER BY keeps that index the way in: with many limited rows in other queues (grouped
    -- jobs are all limited), the generic plan of a plain EXISTS read the whole table instead.
    SELECT pass_no = 1 AND EXISTS (SELECT 1 FROM unnest(wanted) AS w(name)
                                   CROSS JOIN LATERAL (
                                       SELECT j.kind FROM pgq.jobs j
                                       WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                                       ORDER BY j.queue, j.kind LIMIT 1) x)
    INTO any_limited;
    IF any_limited THEN
        -- Its kinds, per queue by a loose index scan (one probe per kind).
        FOREACH q IN ARRAY wanted LOOP
            kinds_here := kinds_here || ARRAY(
                WITH RECURSIVE k AS (
                    (SELECT j.kind FROM pgq.jobs j
                     WHERE j.status = 'queued' AND j.limited AND j.queue = q ORDER BY j.kind LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.kind FROM pgq.jobs j
                            WHERE j.status = 'queued' AND j.limited AND j.queue = q AND j.kind > k.kind
                            ORDER BY j.kind LIMIT 1)
                    FROM k
                    WHERE k.kind IS NOT NULL
                )
                SELECT k.kind FROM k WHERE k.kind IS NOT NULL AND (kinds IS NULL OR k.kind = ANY(kinds)));
        END LOOP;
        -- Those kinds, less the ones whose kind limits are full in a plain read (no lock; committed
        -- claims and finishes only). Locking and counting such a kind would find it full too, unless a
        -- slot freed in between, which the next claim finds: so a claim behind a full rate window or
        -- concurrency limit costs these probes, not the locked path below. Limits stay exact: only
        -- the count made under the lock lets a job of a limited kind through.
        kinds_here := ARRAY(
            SELECT DISTINCT k.kind FROM unnest(kinds_here) AS k(kind)
            WHERE coalesce((SELECT c.max_running > (SELECT count(*) FROM pgq.jobs r
                                                    WHERE r.status = 'running' AND r.kind = c.kind)
                            FROM pgq.concurrency_limits c WHERE c.kind = k.kind), true)
              AND coalesce((SELECT r.max_starts > (SELECT coalesce(sum(s.starts), 0) FROM pgq.rate_limit_starts s
                                                   WHERE s.kind = r.kind
                                                     AND s.at > clock_timestamp() - make_interval(secs => r.per_s))
                            FROM pgq.rate_limits r WHERE r.kind = k.kind), true)
            ORDER BY k.kind);
        any_limited := cardinality(kinds_here) > 0;
    END IF;
    IF any_limited THEN
        -- A kind with grouped jobs queued here and no group_limits row gets one, with no limits
        -- (NULL), once: a row to keep its turn in (turn_after, written by the claimer that holds the
        -- row), so its groups take turns across claims, as those of a kind with group limits do.
        -- (Without it, every claim started at the first group, and the groups late in key order
        -- waited for the backlogs of all the groups before them.) Such a row serialises no claims
        -- (see `held`). ON CONFLICT: a claimer racing to add the same row waits for this one's
        -- commit, then adds nothing.
        INSERT INTO pgq.group_limits (kind)
        SELECT k.kind FROM unnest(kinds_here) AS k(kind)
        WHERE NOT EXISTS (SELECT 1 FROM pgq.group_limits z WHERE z.kind = k.kind)
          AND EXISTS (SELECT 1 FROM unnest(wanted) AS w(name)
                      CROSS JOIN LATERAL (
                          SELECT j.group_key FROM pgq.jobs j
                          WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                            AND j.kind = k.kind AND j.group_key IS NOT NULL
                          ORDER BY j.queue, j.kind, j.group_key LIMIT 1) x)
        ORDER BY k.kind
        ON CONFLICT (kind) DO NOTHING;
        -- Lock those kinds' limit rows, and only those: one claimer at a time counts and claims a
        -- limited kind. SKIP LOCKED: a kind another claimer holds is left for this round (a kind
        -- is claimed only when every limit row it has, kind and group limits, was locked).
        WITH c AS (
            SELECT c.kind, c.max_running FROM pgq.concurrency_limits c
            WHERE c.kind = ANY(kinds_here) ORDER BY c.kind FOR UPDATE SKIP LOCKED
        ),
        r AS (
            SELECT r.kind, r.max_starts, r.per_s FROM pgq.rate_limits r
            WHERE r.kind = ANY(kinds_here) ORDER BY r.kind FOR UPDATE SKIP LOCKED
        ),
        g AS (
            SELECT g.kind, g.max_running, g.max_starts, g.per_s, g.turn_after FROM pgq.group_limits g
            WHERE g.kind = ANY(kinds_here) ORDER BY g.kind FOR UPDATE SKIP LOCKED
        ),
        held AS (
            SELECT k.kind, c.max_running, r.max_starts, r.per_s,
                   c.kind IS NOT NULL OR r.kind IS NOT NULL AS limits, g.kind IS NOT NULL AS grouped,
                   g.max_running AS g_max, g.max_starts AS g_starts, g.per_s AS g_per,
                   CASE WHEN g.kind IS NOT NULL THEN g.turn_after
                        ELSE (SELECT z.turn_after FROM pgq.group_limits z WHERE z.kind = k.kind) END AS turn_after
            FROM unnest(kinds_here) AS k(kind)
            LEFT JOIN c ON c.kind = k.kind
            LEFT JOIN r ON r.kind = k.kind
            LEFT JOIN g ON g.kind = k.kind
            WHERE (c.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits x WHERE x.kind = k.kind))
              AND (r.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.rate_limits y WHERE y.kind = k.kind))
              -- A group_limits row without limits (one the claim added, below) only keeps the turn:
              -- a kind another claimer holds it of is claimed all the same, from the turn read
              -- without the lock, and only the holder writes the turn. One with limits must be held.
              AND (g.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.group_limits z
                                                     WHERE z.kind = k.kind
                                                       AND (z.max_running IS NOT NULL OR z.max_starts IS NOT NULL)))
        )
        -- A kind with group limits, or with grouped jobs queued, is claimed by the walk over its
        -- groups below (w_*); the others as revision 0010 did (l_*), in claim order.
        SELECT array_agg(h.kind ORDER BY h.kind) FILTER (WHERE NOT h.walk AND h.limits),
               array_agg(h.max_running ORDER BY h.kind) FILTER (WHERE NOT h.walk AND h.limits),
               array_agg(h.max_starts ORDER BY h.kind) FILTER (WHERE NOT h.walk AND h.limits),
               array_agg(h.per_s ORDER BY h.kind) FILTER (WHERE NOT h.walk AND h.limits),
               coalesce(array_agg(h.kind ORDER BY h.kind) FILTER (WHERE NOT h.walk AND NOT h.limits), '{}'),
               coalesce(array_agg(h.kind ORDER BY h.kind) FILTER (WHERE h.walk), '{}'),
               array_agg(h.max_running ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.max_starts ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.per_s ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.grouped ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.g_max ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.g_starts ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.g_per ORDER BY h.kind) FILTER (WHERE h.walk),
               array_agg(h.turn_after ORDER BY h.kind) FILTER (WHERE h.walk)
        INTO l_kinds, l_max, l_starts, l_per, loose, w_kinds, w_max, w_starts, w_per, w_grouped, w_gmax,
             w_gstarts, w_gper, w_turn
        FROM (SELECT h.*, h.grouped OR EXISTS (
                         -- ORDER BY: jobs_claim_group_idx, never the kind's whole jobs_claim_limited_idx range.
                         SELECT 1 FROM unnest(wanted) AS w(name)
                         CROSS JOIN LATERAL (
                             SELECT j.group_key FROM pgq.jobs j
                             WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                               AND j.kind = h.kind AND j.group_key IS NOT NULL
                             ORDER BY j.queue, j.kind, j.group_key LIMIT 1) x) AS walk
              FROM held h) h;
        -- Free slots per locked kind, counted in this statement's snapshot, newer than the locks, so
        -- including every earlier claim of the kind; starts are counted and recorded at the clock
        -- time read once the locks are held, which grows in the order claims of a kind run. Then
        -- per kind and queue the best jobs of jobs_claim_limited_idx, reserved like (a).
        at_ts := clock_timestamp();
        l_kinds := coalesce(l_kinds, '{}');
        SELECT coalesce(array_agg(f.free ORDER BY f.ord), '{}')
        INTO k_free
        FROM (SELECT k.ord,
                     greatest(least(
                         coalesce(k.max_running - (SELECT count(*) FROM pgq.jobs r
                                                   WHERE r.status = 'running' AND r.kind = k.kind), 2147483647),
                         coalesce(k.max_starts - (SELECT coalesce(sum(s.starts), 0) FROM pgq.rate_limit_starts s
                                                  WHERE s.kind = k.kind
                                                    AND s.at > at_ts - make_interval(secs => k.per_s)),
                                  2147483647)), 0) AS free
              FROM unnest(l_kinds || w_kinds, l_max || w_max, l_starts || w_starts, l_per || w_per)
                   WITH ORDINALITY AS k(kind, max_running, max_starts, per_s, ord)) f;
        SELECT coalesce(array_agg(p.id), '{}'), coalesce(array_agg(p.tid), '{}')
        INTO l_ids, l_tids
        FROM (
            SELECT p.id, p.tid
            FROM (SELECT k.kind, k.free
                  FROM unnest(l_kinds, k_free[1:cardinality(l_kinds)]) AS k(kind, free)
                  WHERE k.kind IS NOT NULL
                  UNION ALL
                  SELECT o.kind, lim FROM unnest(loose) AS o(kind)) f
            CROSS JOIN LATERAL (
                SELECT y.id, y.tid
                FROM (SELECT x.id, x.tid, x.priority, x.run_at
                      FROM unnest(wanted) AS w(name)
                      CROSS JOIN LATERAL (
                          SELECT c.id, c.tid, c.priority, c.run_at
                          FROM (SELECT j.id, j.ctid AS tid, j.priority, j.run_at
                                FROM pgq.jobs j
                                WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = f.kind
                                  AND j.run_at <= now()
                                ORDER BY j.priority, j.run_at, j.id
                                OFFSET 0) c
                          WHERE pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
                          LIMIT least(f.free, lim)
                      ) x) y
                ORDER BY y.priority, y.run_at, y.id
                LIMIT least(f.free, lim)
            ) p
            WHERE f.free > 0) p;

        -- The walk over the groups of each kind in w_kinds (see the top of this file), one priority
        -- at a time, best first (priority still comes first: a group's worse jobs wait while another
        -- group with room has better ones). Per priority: one head of that priority per group with
        -- room, in group key order from after the kind's turn_after round to it, the jobs without a
        -- group key as one group at the end of the range; then, with the batch not full, more jobs
        -- of the groups that had room for more, in the same order.
        FOR wi IN 1..cardinality(w_kinds) LOOP
            budget := least(k_free[cardinality(l_kinds) + wi], lim);
            w_got := 0;
            last_served := NULL;
            level := NULL;
            used_keys := '{}';
            used_n := '{}';
            WHILE w_got < budget LOOP
                -- The next priority with ready jobs of the kind (jobs_claim_limited_idx, a probe per queue).
                SELECT min(x.priority) INTO level
                FROM unnest(wanted) AS w(name)
                CROSS JOIN LATERAL (
                    SELECT j.priority FROM pgq.jobs j
                    WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = w_kinds[wi]
                      AND j.priority > coalesce(level, -32769) AND j.run_at <= now()
                    ORDER BY j.priority, j.run_at, j.id LIMIT 1) x;
                EXIT WHEN level IS NULL;
                spare_keys := '{}';
                spare_n := '{}';
                -- Segments: 1, the keys after turn_after (all keys without one), per queue; 2, the jobs
                -- without a group key; 3, the keys up to turn_after, per queue.
                FOR w_phase IN 1..3 LOOP
                    EXIT WHEN w_got >= budget;
                    IF w_phase = 2 THEN
                        g_ids := pgq.claim_group_heads(wanted, w_kinds[wi], NULL, level::smallint, 1, l_ids);
                        l_ids := l_ids || g_ids;
                        w_got := w_got + cardinality(g_ids);
                        IF cardinality(g_ids) > 0 AND budget > w_got THEN
                            spare_keys := spare_keys || NULL::text;
                            spare_n := spare_n || (budget - w_got);
                        END IF;
                        CONTINUE;
                    END IF;
                    CONTINUE WHEN w_phase = 3 AND w_turn[wi] IS NULL;
                    FOREACH q IN ARRAY wanted LOOP
                        EXIT WHEN w_got >= budget;
                        -- One statement per segment and queue: a loose index scan of
                        -- jobs_claim_group_idx over the group keys (a recursive CTE, read only as far as
                        -- the LIMIT needs), each group's room (counted after the lock on the kind's
                        -- limit rows: exact; less what it got at better priorities), and the head of
                        -- each group with room at this priority, reserved as (a) reserves.
                        SELECT coalesce(array_agg(h.group_key ORDER BY h.ord), '{}'),
                               coalesce(array_agg(h.id ORDER BY h.ord), '{}'),
                               coalesce(array_agg(h.free ORDER BY h.ord), '{}')
                        INTO seg_keys, g_ids, seg_free
                        FROM (
                            WITH RECURSIVE g AS (
                                (SELECT j.group_key, 1 AS ord FROM pgq.jobs j
                                 WHERE j.status = 'queued' AND j.limited AND j.queue = q AND j.kind = w_kinds[wi]
                                   AND j.group_key > CASE WHEN w_phase = 1 THEN coalesce(w_turn[wi], '') ELSE '' END
                                 ORDER BY j.queue, j.kind, j.group_key LIMIT 1)
                                UNION ALL
                                SELECT (SELECT j.group_key FROM pgq.jobs j
                                        WHERE j.status = 'queued' AND j.limited AND j.queue = q
                                          AND j.kind = w_kinds[wi] AND j.group_key > g.group_key
                                        ORDER BY j.queue, j.kind, j.group_key LIMIT 1), g.ord + 1
                                FROM g
                                WHERE g.group_key IS NOT NULL AND (w_phase = 1 OR g.group_key < w_turn[wi])
                            )
                            SELECT g.group_key, g.ord, room.free, hd.id
                            FROM g
                            CROSS JOIN LATERAL (
                                SELECT least(
                                    CASE WHEN w_gmax[wi] IS NULL THEN 2147483647
                                         ELSE w_gmax[wi] - (SELECT count(*) FROM pgq.jobs r
                                                            WHERE r.status = 'running' AND r.kind = w_kinds[wi]
                                                              AND r.group_key = g.group_key) END,
                                    CASE WHEN w_gstarts[wi] IS NULL THEN 2147483647
                                         ELSE w_gstarts[wi] - (SELECT coalesce(sum(s.starts), 0)
                                                               FROM pgq.group_rate_starts s
                                                               WHERE s.kind = w_kinds[wi] AND s.group_key = g.group_key
                                                                 AND s.at > at_ts - make_interval(secs => w_gper[wi]))
                                    END)
                                    - CASE WHEN cardinality(used_keys) = 0 THEN 0
                                           ELSE coalesce((SELECT sum(u.n) FROM unnest(used_keys, used_n) AS u(k, n)
                                                          WHERE u.k = g.group_key), 0) END AS free
                            ) room
                            CROSS JOIN LATERAL (
                                SELECT c.id
                                FROM (SELECT j.id FROM pgq.jobs j
                                      WHERE room.free > 0  -- checked first: no head of a full group is reserved
                                        AND j.status = 'queued' AND j.limited AND j.queue = q
                                        AND j.kind = w_kinds[wi] AND j.group_key = g.group_key
                                        AND j.priority = level AND j.run_at <= now()
                                      ORDER BY j.group_key, j.priority, j.run_at, j.id
                                      OFFSET 0) c
                                WHERE c.id <> ALL(l_ids)
                                  AND pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
                                LIMIT 1
                            ) hd
                            WHERE g.group_key IS NOT NULL
                              AND (w_phase = 1 OR g.group_key <= w_turn[wi])
                            LIMIT budget - w_got
                        ) h;
                        l_ids := l_ids || g_ids;
                        w_got := w_got + cardinality(g_ids);
                        IF cardinality(seg_keys) > 0 THEN
                            last_served := seg_keys[cardinality(seg_keys)];
                            used_keys := used_keys || seg_keys;
                            used_n := used_n || array_fill(1, ARRAY[cardinality(seg_keys)]);
                            SELECT spare_keys || coalesce(array_agg(x.k ORDER BY x.o) FILTER (WHERE x.f > 1), '{}'),
                                   spare_n || coalesce(array_agg(x.f - 1 ORDER BY x.o) FILTER (WHERE x.f > 1), '{}')
                            INTO spare_keys, spare_n
                            FROM unnest(seg_keys, seg_free) WITH ORDINALITY AS x(k, f, o);
                        END IF;
                    END LOOP;
                END LOOP;
                FOR si IN 1..cardinality(spare_keys) LOOP
                    EXIT WHEN w_got >= budget;
                    g_ids := pgq.claim_group_heads(wanted, w_kinds[wi], spare_keys[si], level::smallint,
                                                   least(spare_n[si], budget - w_got), l_ids);
                    l_ids := l_ids || g_ids;
                    w_got := w_got + cardinality(g_ids);
                    IF spare_keys[si] IS NOT NULL AND cardinality(g_ids) > 0 THEN
                        used_keys := used_keys || spare_keys[si];
                        used_n := used_n || cardinality(g_ids);
                    END IF;
                END LOOP;
            END LOOP;
            IF w_grouped[wi] AND last_served IS NOT NULL THEN
                UPDATE pgq.group_limits g SET turn_after = last_served WHERE g.kind = w_kinds[wi];
            END IF;
        END LOOP;
        IF cardinality(w_kinds) > 0 THEN
            -- Where the rows reserved by the walk are, for the take.
            l_tids := ARRAY(SELECT j.ctid FROM pgq.jobs j WHERE j.id = ANY(l_ids));
        END IF;
    END IF;

    IF pass_no > 1 THEN
        l_ids := '{}';
        l_tids := '{}';
        w_kinds := '{}';
    END IF;
    EXIT WHEN cardinality(found_ids) + cardinality(l_ids) = 0;

    -- Fair order among groups when some reserved rows must stay out: within a priority, each
    -- group's first row, then each group's second, and so on (rows without a group key are one
    -- group), so that no group's backlog crowds out another's single job. Plain work alone keeps
    -- the claim order, and skips this statement.
    IF cardinality(l_ids) > 0 AND cardinality(found_ids) + cardinality(l_ids) > lim - taken THEN
        fair_tids := ARRAY(
            SELECT y.tid
            FROM (SELECT x.ctid AS tid, x.priority, x.run_at, x.id,
                         row_number() OVER (PARTITION BY x.priority, x.group_key ORDER BY x.run_at, x.id) AS turn
                  FROM pgq.jobs x
                  WHERE x.ctid = ANY(found_tids || l_tids) AND x.status = 'queued') y
            ORDER BY y.priority, y.turn, y.run_at, y.id
            LIMIT lim - taken);
    ELSE
        fair_tids := found_tids || l_tids;
    END IF;

    -- (c) Take: the best `lim` of the reserved rows still queued in this newer snapshot, locked in
    -- claim order (FOR NO KEY UPDATE: the lock an UPDATE takes anyway), skipping rows some other
    -- transaction holds (a producer, an operator).
    RETURN QUERY
    WITH picked AS (
        SELECT x.ctid AS tid
        FROM pgq.jobs x
        WHERE x.ctid = ANY(fair_tids) AND x.status = 'queued'
        ORDER BY x.priority, x.run_at, x.id
        LIMIT lim - taken
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE pgq.jobs j
        SET status = 'running',
            attempts = j.attempts + 1,
            lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => lease_s),
            claimed_by = worker,
            -- With limited kinds, the time their starts are counted at (rate windows).
            started_at = coalesce(at_ts, statement_timestamp()),
            -- Revision 0016: the raises of the job's key this claim sees are folded in, so the
            -- worker gets the watermark the producers asked for (keyed rows only).
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END
        -- Where the rows locked above are (they cannot move: this transaction holds them).
        WHERE j.ctid = ANY(ARRAY(SELECT p.tid FROM picked p))
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.status::text AS status, j.run_at, j.attempts,
                  j.max_attempts, j.dedupe_key, j.lease_token::text AS lease_token, j.lease_expires_at,
                  j.claimed_by, j.last_error, j.result, j.input_watermark, j.done_watermark, j.created_at,
                  j.started_at, j.finished_at, j.progress, j.group_key
    ),
    -- The window of each rate-limited kind: this claim's starts in, the starts that left it out.
    rate_started AS (
        INSERT INTO pgq.rate_limit_starts (kind, at, starts)
        SELECT c.kind, at_ts, count(*)
        FROM claimed c
        JOIN unnest(l_kinds || w_kinds, l_per || w_per) AS k(kind, per_s) ON k.kind = c.kind AND k.per_s IS NOT NULL
        GROUP BY c.kind
    ),
    rate_expired AS (
        DELETE FROM pgq.rate_limit_starts s
        USING unnest(l_kinds || w_kinds, l_per || w_per) AS k(kind, per_s)
        WHERE k.per_s IS NOT NULL AND s.kind = k.kind AND s.at <= at_ts - make_interval(secs => k.per_s)
    )
    SELECT c.id, c.queue, c.kind, c.payload, c.priority, c.status, c.run_at, c.attempts, c.max_attempts,
           c.dedupe_key, c.lease_token, c.lease_expires_at, c.claimed_by, c.last_error, c.result,
           c.input_watermark, c.done_watermark, c.created_at, c.started_at, c.finished_at, c.progress,
           c.group_key
    FROM claimed c
    ORDER BY c.priority, c.run_at, c.id;
    GET DIAGNOSTICS got = ROW_COUNT;
    taken := taken + got;
    -- The window of each group of a kind with a group rate limit: the starts of this claim in (the
    -- jobs it took from the walk: started at at_ts under this worker's name), those that left it out.
    -- Its own statement, run only by such claims, so that the take of plain work writes no more
    -- tables than before.
    IF cardinality(w_kinds) > 0 AND EXISTS (SELECT 1 FROM unnest(w_gper) AS p(per_s) WHERE p.per_s IS NOT NULL) THEN
        INSERT INTO pgq.group_rate_starts (kind, group_key, at, starts)
        SELECT j.kind, j.group_key, at_ts, count(*)
        FROM pgq.jobs j
        JOIN unnest(w_kinds, w_gper) AS k(kind, per_s) ON k.kind = j.kind AND k.per_s IS NOT NULL
        WHERE j.id = ANY(l_ids) AND j.status = 'running' AND j.started_at = at_ts AND j.claimed_by = worker
          AND j.group_key IS NOT NULL
        GROUP BY j.kind, j.group_key;
        DELETE FROM pgq.group_rate_starts s
        USING unnest(w_kinds, w_gper) AS k(kind, per_s)
        WHERE k.per_s IS NOT NULL AND s.kind = k.kind AND s.at <= at_ts - make_interval(secs => k.per_s);
    END IF;
    -- Done when the claim is full, when nothing reserved was lost, or after three rounds.
    EXIT WHEN taken >= lim OR got >= cardinality(found_ids) + cardinality(l_ids) OR pass_no >= 3;
    END LOOP;
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;
COMMENT ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) IS
    'Claim up to lim (at most 256) ready jobs of the given queues (NULL: every queue) and kinds (NULL: any), '
    'honouring pauses, concurrency and rate limits and per-group limits (pgq.group_limits) exactly, and '
    'taking group keys in turn within a priority: each gets a new attempt under a fresh lease token '
    'expiring lease_s seconds from now, claimed_by worker. Returns them in claim order (priority, run_at, id). '
    'Needs pgq_worker.';

DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT o.proname, o.grantee FROM pg_temp.pgq_0017_grants o ORDER BY 1, 2 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       (SELECT p.oid::regprocedure FROM pg_proc p
                        WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = g.proname), g.grantee);
    END LOOP;
END;
$grants$;

DROP TABLE pgq.sequence_tails;
ALTER TABLE pgq.job_dependencies DROP COLUMN sequence_hold;
ALTER TABLE pgq.jobs DROP COLUMN sequence_key;
