-- pgq schema, revision 0017: sequences. Jobs with the same sequence key in a queue run one at a
-- time, in enqueue order, across all workers.
--
-- A sequence is an implicit dependency chain, built on the workflow edges of revision 0007: the
-- enqueue of a job with a sequence key makes it depend on the key's tail (the job of that key
-- enqueued last), through an edge of pgq.job_dependencies marked as a sequence edge
-- (sequence_hold not NULL). The claim never reads a key: a sequenced job is `waiting` until its
-- predecessor finished, then `queued` like any other, so the claim and the plain INSERTs of
-- sql/job_insert*.sql do no more work than before (sequenced jobs go through pgq.enqueue_after).
--
-- The tail of each (queue, key) is a row of pgq.sequence_tails, upserted by the enqueue: its row
-- lock serializes the producers of one key (two producers of different keys never meet), and no
-- worker ever touches the table. A batch locks its keys in one global order (queue, key), so
-- producers cannot deadlock on them; jobs of one key in one batch are chained in input order. The
-- batch takes its ids after those locks, so each key's chain follows id order.
--
-- How a predecessor's finish moves the sequence (pgq.release_children):
--   succeeded, cancelled      the next job is released (an operator's cancel moves the sequence on);
--   failed, sequence_hold     the edge stays open: the next job waits, held, until the failed job
--                             is retried (and succeeds) or cancelled (pgq.cancel now takes a failed
--                             job that holds a sequence);
--   failed, not sequence_hold the job was enqueued with sequence_on_failure 'continue': released.
-- pgq.settle leaves held edges alone. pgq.explain says 'sequence_held' (the HOOK(sequences) of
-- revision 0013), and now also tells revision 0014's full group limits.

ALTER TABLE pgq.jobs ADD COLUMN sequence_key text;
COMMENT ON COLUMN pgq.jobs.sequence_key IS
    'The job''s sequence (revision 0017): jobs with the same key in a queue run one at a time, in '
    'enqueue order. NULL: none.';

ALTER TABLE pgq.job_dependencies ADD COLUMN sequence_hold boolean;
COMMENT ON COLUMN pgq.job_dependencies.sequence_hold IS
    'NULL: an edge of depends_on. Otherwise a sequence edge (the child is the next job of the parent''s '
    'sequence): true, the parent failing for good holds the child (the edge stays open until the parent '
    'is retried and succeeds, or is cancelled); false (sequence_on_failure ''continue''), it releases it.';

CREATE TABLE pgq.sequence_tails (
    queue        text NOT NULL,
    sequence_key text NOT NULL,
    job_id       bigint,
    hold         boolean NOT NULL DEFAULT true,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, sequence_key)
);
COMMENT ON TABLE pgq.sequence_tails IS
    'The last job enqueued of each sequence (queue, sequence_key): the job the next one of the key '
    'depends on. Written only by pgq.enqueue_after, under the row lock that serializes the key''s '
    'producers; workers never touch it.';
COMMENT ON COLUMN pgq.sequence_tails.queue IS 'Queue of the sequence.';
COMMENT ON COLUMN pgq.sequence_tails.sequence_key IS 'Sequence key.';
COMMENT ON COLUMN pgq.sequence_tails.job_id IS 'The sequence''s last enqueued job (pgq.jobs.id; NULL only while its first enqueue runs).';
COMMENT ON COLUMN pgq.sequence_tails.hold IS
    'Whether that job failing for good holds the sequence (false: enqueued with sequence_on_failure ''continue'').';
COMMENT ON COLUMN pgq.sequence_tails.updated_at IS 'When the tail last changed.';

-- pgq.enqueue_after and pgq.enqueue take the sequence keys (a new signature is a new function: the
-- old ones are dropped, their grants carried to the new ones at the end).
CREATE TEMP TABLE pgq_0017_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[]);

-- Revision 0014's body, with the sequence edges added to the given ones: sequence_keys[i] is job i's
-- key (NULL: none), sequence_continue[i] whether its failure lets its sequence move on.
CREATE FUNCTION pgq.enqueue_after(
    kinds             text[],
    payloads          jsonb[],
    queues            text[],
    priorities        smallint[],
    run_ats           timestamptz[],
    delays            double precision[],
    max_attempts      integer[],
    run_on_failure    boolean[],
    edge_jobs         integer[],
    edge_parents      bigint[],
    group_keys        text[] DEFAULT NULL,
    sequence_keys     text[] DEFAULT NULL,
    sequence_continue boolean[] DEFAULT NULL
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    missing   bigint;
    n_locked  bigint;
    new_ids   bigint[];
    seq_jobs  integer[] := '{}';
    seq_prevs bigint[] := '{}';
    seq_holds boolean[] := '{}';
BEGIN
    IF cardinality(edge_jobs) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'pgq.enqueue_after: edge_jobs and edge_parents differ in length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(array_remove(sequence_keys, NULL)) > 0 THEN
        -- Each key's tail row, locked in (queue, key) order (created if new, its job_id NULL till below)
        -- by the upsert's no-op update, before the ids are taken: the producers of a key take theirs
        -- one after the other, so a key's chain follows id order, whatever order they commit in.
        WITH locked AS (
            INSERT INTO pgq.sequence_tails AS t (queue, sequence_key)
            SELECT DISTINCT coalesce(q.queue, 'default'), k.key
            FROM unnest(sequence_keys) WITH ORDINALITY AS k(key, ord)
            LEFT JOIN unnest(queues) WITH ORDINALITY AS q(queue, ord) ON q.ord = k.ord
            WHERE k.key IS NOT NULL
            ORDER BY 1, 2
            ON CONFLICT (queue, sequence_key) DO UPDATE SET job_id = t.job_id
            RETURNING 1
        )
        SELECT count(*) INTO n_locked FROM locked;
    END IF;
    -- The ids, taken from the sequence in input order: a sequence edge within the batch names its
    -- parent by id.
    new_ids := ARRAY(SELECT nextval(pg_get_serial_sequence('pgq.jobs', 'id'))
                     FROM generate_series(1, coalesce(cardinality(kinds), 0)) AS g(n) ORDER BY g.n);
    IF cardinality(array_remove(sequence_keys, NULL)) > 0 THEN
        -- The tails, read under the locks taken above (this statement's snapshot sees the last
        -- producer's commit).
        WITH keyed AS (
            SELECT k.ord, coalesce(q.queue, 'default') AS queue, k.key,
                   coalesce(c.cont, false) AS cont
            FROM unnest(sequence_keys) WITH ORDINALITY AS k(key, ord)
            LEFT JOIN unnest(queues) WITH ORDINALITY AS q(queue, ord) ON q.ord = k.ord
            LEFT JOIN unnest(sequence_continue) WITH ORDINALITY AS c(cont, ord) ON c.ord = k.ord
            WHERE k.key IS NOT NULL
        ),
        tails AS (
            SELECT t.queue, t.sequence_key, t.job_id, t.hold
            FROM pgq.sequence_tails t
            WHERE (t.queue, t.sequence_key) IN (SELECT x.queue, x.key FROM keyed x)
        ),
        chained AS (
            -- Each job's predecessor: the previous job of its key in the batch, else the key's tail.
            SELECT x.ord, x.queue, x.key,
                   lag(x.ord) OVER w AS prev_ord,
                   lag(x.cont) OVER w AS prev_cont
            FROM keyed x
            WINDOW w AS (PARTITION BY x.queue, x.key ORDER BY x.ord)
        )
        SELECT coalesce(array_agg(c.ord::integer ORDER BY c.ord), '{}'),
               coalesce(array_agg(CASE WHEN c.prev_ord IS NOT NULL THEN new_ids[c.prev_ord] ELSE t.job_id END
                                  ORDER BY c.ord), '{}'),
               coalesce(array_agg(CASE WHEN c.prev_ord IS NOT NULL THEN NOT c.prev_cont ELSE t.hold END
                                  ORDER BY c.ord), '{}')
        INTO seq_jobs, seq_prevs, seq_holds
        FROM chained c
        JOIN tails t ON t.queue = c.queue AND t.sequence_key = c.key
        WHERE c.prev_ord IS NOT NULL OR t.job_id IS NOT NULL;
        -- The keys' new tails: the last job of each key in the batch.
        UPDATE pgq.sequence_tails t
        SET job_id = new_ids[l.ord], hold = NOT l.cont, updated_at = now()
        FROM (SELECT DISTINCT ON (coalesce(q.queue, 'default'), k.key)
                     coalesce(q.queue, 'default') AS queue, k.key, k.ord, coalesce(c.cont, false) AS cont
              FROM unnest(sequence_keys) WITH ORDINALITY AS k(key, ord)
              LEFT JOIN unnest(queues) WITH ORDINALITY AS q(queue, ord) ON q.ord = k.ord
              LEFT JOIN unnest(sequence_continue) WITH ORDINALITY AS c(cont, ord) ON c.ord = k.ord
              WHERE k.key IS NOT NULL
              ORDER BY 1, 2, k.ord DESC) l
        WHERE t.queue = l.queue AND t.sequence_key = l.key;
    END IF;
    -- The parents, given and tails: FOR KEY SHARE, which no UPDATE waits for, and no write to them
    -- (revision 0012).
    PERFORM 1 FROM pgq.jobs j
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents || seq_prevs) AS p)
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
        SELECT i.ord, new_ids[i.ord] AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()) AS run_at,
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure,
               i.group_key, i.sequence_key
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure, group_keys,
                    sequence_keys)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure,
                                  group_key, sequence_key, ord)
    ),
    given AS (
        SELECT DISTINCT e.ord, e.parent_id
        FROM unnest(edge_jobs, edge_parents) AS e(ord, parent_id)
    ),
    seq AS (
        -- A predecessor purged meanwhile (no row) is no edge; one given as a parent too stays a
        -- sequence edge (it orders the sequence).
        SELECT s.ord, s.parent_id, s.hold
        FROM unnest(seq_jobs, seq_prevs, seq_holds) AS s(ord, parent_id, hold)
    ),
    edges AS (
        SELECT a.ord, a.parent_id, s.hold AS sequence_hold,
               -- A predecessor of this batch is inserted below, not finished.
               coalesce(p.status::text, 'queued') AS parent_status
        FROM (SELECT g.ord, g.parent_id FROM given g UNION SELECT s.ord, s.parent_id FROM seq s) a
        LEFT JOIN seq s ON s.ord = a.ord AND s.parent_id = a.parent_id
        LEFT JOIN pgq.jobs p ON p.id = a.parent_id
        WHERE p.id IS NOT NULL OR a.parent_id = ANY(new_ids)
    ),
    state AS (
        SELECT u.ord,
               count(e.parent_id) FILTER (WHERE e.parent_status IN ('waiting', 'queued', 'running')
                                             OR (e.parent_status = 'failed' AND e.sequence_hold)) AS pending,
               min(e.parent_id) FILTER (WHERE e.parent_status IN ('failed', 'cancelled')
                                          AND e.sequence_hold IS NULL AND NOT u.run_on_failure) AS doomed_by
        FROM input u
        LEFT JOIN edges e ON e.ord = u.ord
        GROUP BY u.ord
    ),
    ins AS (
        INSERT INTO pgq.jobs (id, kind, payload, queue, priority, run_at, max_attempts, status,
                              pending_parents, finished_at, last_error, limited, group_key, sequence_key)
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
               u.group_key, u.sequence_key
        FROM input u JOIN state s ON s.ord = u.ord
        ORDER BY u.ord
        RETURNING pgq.jobs.id, pgq.jobs.queue, pgq.jobs.status
    ),
    deps AS (
        INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome, sequence_hold)
        SELECT u.id, e.parent_id, e.sequence_hold IS NULL AND NOT u.run_on_failure,
               CASE WHEN e.parent_status IN ('succeeded', 'cancelled')
                      OR (e.parent_status = 'failed' AND e.sequence_hold IS NOT TRUE)
                    THEN e.parent_status::pgq.job_status END,
               e.sequence_hold
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
                                             integer[], boolean[], integer[], bigint[], text[], text[], boolean[])
    FROM PUBLIC;
COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[], text[], text[], boolean[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies. '
    'group_keys: each job''s group (NULL: none). sequence_keys: each job''s sequence (NULL: none), run after '
    'the key''s previous job; sequence_continue: whether a job failing for good lets its sequence move on.';

-- The SQL API gains sequence_key and sequence_on_failure (at the end, with defaults: existing calls
-- keep working). A job with a sequence key goes through pgq.enqueue_after, like one with depends_on.
CREATE FUNCTION pgq.enqueue(
    kind                text,
    payload             jsonb DEFAULT '{}',
    queue               text DEFAULT 'default',
    priority            integer DEFAULT 0,
    run_at              timestamptz DEFAULT NULL,
    dedupe_key          text DEFAULT NULL,
    watermark           bigint DEFAULT NULL,
    max_attempts        integer DEFAULT NULL,
    depends_on          bigint[] DEFAULT NULL,
    on_parent_failure   text DEFAULT 'cancel',
    group_key           text DEFAULT NULL,
    sequence_key        text DEFAULT NULL,
    sequence_on_failure text DEFAULT 'hold'
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF on_parent_failure IS NULL OR on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'', got %', coalesce(on_parent_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_on_failure IS NULL OR sequence_on_failure NOT IN ('hold', 'continue') THEN
        RAISE EXCEPTION 'sequence_on_failure must be ''hold'' or ''continue'', got %',
                        coalesce(sequence_on_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_key = '' THEN
        RAISE EXCEPTION 'sequence_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF depends_on IS NULL AND sequence_key IS NULL THEN
        RETURN (SELECT e.id FROM pgq.enqueue_many(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts],
            ARRAY[group_key]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION '% cannot be combined with dedupe_key or watermark',
                        CASE WHEN depends_on IS NULL THEN 'sequence_key' ELSE 'depends_on' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[coalesce(cardinality(depends_on), 0)]), coalesce(depends_on, '{}'), ARRAY[group_key],
        ARRAY[sequence_key], ARRAY[sequence_on_failure = 'continue']) AS e);
END;
$fn$;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text,
                                text, text) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback); '
    'group_key: the job''s group (per-group limits, fair claiming); sequence_key: its sequence (runs after '
    'the key''s previous job, one at a time); sequence_on_failure: ''hold'' (default: failing for good holds '
    'the sequence) or ''continue''.';
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text, text, text) FROM PUBLIC;

-- Revision 0012's release, with held sequence edges left open: a failed parent does not mark (nor
-- count off) an edge with sequence_hold; its retry's success or its cancel will.
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
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL
                             AND d.sequence_hold IS NOT TRUE) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     UNION
                     -- Held edges: released only by a parent that succeeded or was cancelled.
                     SELECT h.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL AND d.sequence_hold) h
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = h.parent_id) IN ('succeeded', 'cancelled')
                     ORDER BY 1);
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
              AND NOT (d.sequence_hold IS TRUE AND p.status = 'failed')
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

-- Revision 0016's settle, which leaves the held sequence edges alone: a failed parent with only held
-- edges open has nothing to settle (it would otherwise come back every second, and take the place
-- of parents that do).
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
                     FROM (SELECT d.parent_id, bool_and(d.sequence_hold IS TRUE) AS held
                           FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL
                           GROUP BY d.parent_id) e
                     CROSS JOIN LATERAL (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id) s
                     WHERE s.status IN ('succeeded', 'cancelled') OR (s.status = 'failed' AND NOT e.held)
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

-- Revision 0012's cancel, which also takes a failed job that holds its sequence (an open held edge):
-- cancelling it is how an operator lets the sequence move on without running it again.
CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    IF NOT FOUND THEN
        RETURN QUERY
        UPDATE pgq.jobs j SET status = 'cancelled'
        WHERE j.id = cancel.job_id AND j.status = 'failed'
          AND EXISTS (SELECT 1 FROM pgq.job_dependencies d
                      WHERE d.parent_id = j.id AND d.parent_outcome IS NULL AND d.sequence_hold)
        RETURNING j.*;
    END IF;
    PERFORM pgq.after_finish(ARRAY[job_id]);
END;
$fn$;
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel), or a failed job '
    'that holds its sequence (which then moves on); its dependents that needed it to succeed are '
    'cancelled too, and its waiters told. Returns the job if cancelled.';

-- pgq.explain (revision 0013) says 'sequence_held' for a job waiting on its sequence predecessor
-- (held by job N: running, queued, waiting, or failed and holding), where its HOOK(sequences) was left;
-- waiting_for_parents names the other parents only. It also tells the group limits of revision 0014
-- (pgq.group_limits): a grouped job whose group has max_running jobs of its kind running
-- ('group_concurrency_limit_full', with the jobs holding it) or max_starts starts in its window
-- ('group_rate_limit_full', until when), counted as the claim counts them; without these, such a job
-- was called 'ready'.
CREATE OR REPLACE FUNCTION pgq.explain(p_job_id bigint)
RETURNS TABLE (reason text, detail text, facts jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
WITH job AS (
    -- status as text: the enum's value 'waiting' is new in this transaction when the migrations run
    -- in one (revision 0007 adds it), and a body may not name it as an enum literal then.
    SELECT j.id, j.queue, j.kind, j.status::text AS status, j.run_at, j.priority, j.pending_parents, j.attempts,
           j.max_attempts, j.last_error, j.finished_at, j.claimed_by, j.started_at, j.lease_expires_at,
           j.sequence_key, j.group_key
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
    -- Revision 0017: the job's sequence predecessor has not finished, or failed and holds it.
    SELECT 4, 'sequence_held',
           format('held by job %s (sequence %s, %s)', h.parent_id, a.sequence_key,
                  CASE WHEN h.status = 'failed' THEN 'which failed: retry or cancel it'
                       ELSE coalesce(h.status, 'deleted') END),
           jsonb_build_object('held_by', h.parent_id, 'sequence_key', a.sequence_key, 'held_by_status', h.status)
    FROM active a
    JOIN LATERAL (SELECT d.parent_id, p.status::text AS status
                  FROM pgq.job_dependencies d LEFT JOIN pgq.jobs p ON p.id = d.parent_id
                  WHERE d.job_id = a.id AND d.parent_outcome IS NULL AND d.sequence_hold IS NOT NULL) h ON true
    WHERE a.status = 'waiting'
    UNION ALL
    SELECT 5, 'waiting_for_parents',
           format('waits for parent(s) %s', array_to_string(p.ids, ', ')),
           jsonb_build_object('parents', to_jsonb(p.ids), 'pending_parents', a.pending_parents)
    FROM active a
    CROSS JOIN LATERAL (SELECT coalesce(array_agg(d.parent_id ORDER BY d.parent_id), '{}') AS ids
                        FROM pgq.job_dependencies d
                        WHERE d.job_id = a.id AND d.parent_outcome IS NULL AND d.sequence_hold IS NULL) p
    WHERE a.status = 'waiting'
      AND (cardinality(p.ids) > 0
           OR NOT EXISTS (SELECT 1 FROM pgq.job_dependencies s
                          WHERE s.job_id = a.id AND s.parent_outcome IS NULL AND s.sequence_hold IS NOT NULL))
    UNION ALL
    SELECT 6, 'queue_paused', format('queue %s is paused (by %s since %s)', p.queue, p.paused_by, p.paused_at),
           jsonb_build_object('queue', p.queue, 'paused_by', p.paused_by, 'paused_at', p.paused_at)
    FROM active a JOIN pgq.paused_queues p ON p.queue = a.queue
    UNION ALL
    SELECT 7, 'concurrency_limit_full',
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
    SELECT 8, 'rate_limit_full',
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
    -- Revision 0014's per-group limits, for a job with a group key (the others are not limited by
    -- them): its group's running jobs of the kind, and its group's starts in the window.
    SELECT 9, 'group_concurrency_limit_full',
           format('group concurrency limit of %s is full for group %s: %s of %s running (jobs %s)', g.kind,
                  a.group_key, h.n, g.max_running, array_to_string(h.ids, ', ')),
           jsonb_build_object('kind', g.kind, 'group_key', a.group_key, 'max_running', g.max_running,
                              'running', h.n, 'holders', to_jsonb(h.ids))
    FROM active a
    JOIN pgq.group_limits g ON g.kind = a.kind AND g.max_running IS NOT NULL
    CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce((array_agg(r.id ORDER BY r.id))[1:20], '{}') AS ids
                        FROM pgq.jobs r
                        WHERE r.status = 'running' AND r.kind = a.kind AND r.group_key = a.group_key) h
    WHERE a.group_key IS NOT NULL AND h.n >= g.max_running
    UNION ALL
    SELECT 10, 'group_rate_limit_full',
           format('group rate limit of %s (%s per %s s) is full for group %s until %s', g.kind, g.max_starts,
                  g.per_s, a.group_key, s.until),
           jsonb_build_object('kind', g.kind, 'group_key', a.group_key, 'max_starts', g.max_starts,
                              'per_s', g.per_s, 'starts', s.total, 'until', s.until)
    FROM active a
    JOIN pgq.group_limits g ON g.kind = a.kind AND g.max_starts IS NOT NULL
    CROSS JOIN LATERAL (
        SELECT max(x.total) AS total,
               min(x.at + make_interval(secs => g.per_s)) FILTER (WHERE x.cum >= x.total - g.max_starts + 1) AS until
        FROM (SELECT st.at, sum(st.starts) OVER (ORDER BY st.at ROWS UNBOUNDED PRECEDING) AS cum,
                     sum(st.starts) OVER () AS total
              FROM pgq.group_rate_starts st
              WHERE st.kind = a.kind AND st.group_key = a.group_key
                AND st.at > now() - make_interval(secs => g.per_s)) x
    ) s
    WHERE a.group_key IS NOT NULL AND s.total >= g.max_starts
    UNION ALL
    SELECT 11, 'no_live_worker', format('no live worker claims from queue %s', a.queue),
           jsonb_build_object('queue', a.queue)
    FROM active a WHERE NOT EXISTS (SELECT 1 FROM serving)
    UNION ALL
    SELECT 12, 'unknown_kind',
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
      SELECT 13, 'ready', format('ready: position %s in queue %s', pos.n + 1, a.queue),
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
    'sequence_held, waiting_for_parents, queue_paused, concurrency_limit_full, rate_limit_full, '
    'group_concurrency_limit_full, group_rate_limit_full, no_live_worker, unknown_kind) with its facts, or ready with its position in the queue; no row: no such job.';

-- The replaced functions' EXECUTE grants go to their successors (the roles script grants the new
-- signatures from now on). No role gets a write on pgq.sequence_tails nor INSERT (sequence_key) on
-- pgq.jobs: a sequenced job is enqueued by pgq.enqueue_after alone, which chains it.
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
