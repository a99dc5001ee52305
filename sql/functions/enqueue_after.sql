CREATE OR REPLACE FUNCTION pgq.enqueue_after(
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
    -- A producer of a scoped role set enqueues in its queues only, after parents of those queues
    -- (revision 0021).
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        PERFORM pgq.check_queues(queues, edge_parents);
    END IF;
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
    new_ids := ARRAY(SELECT nextval('pgq.jobs_id_seq')
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
    -- The parents, given and tails, that finished: FOR KEY SHARE, so that no purge deletes one before
    -- the edges to it commit, and no write to them (revision 0012). Since revision 0033 a job that
    -- finishes moves to pgq.finished_jobs (a delete of its live row, which would wait for that lock),
    -- so parents still live are read, not locked: one that finishes meanwhile does not see the new
    -- edges, and pgq.settle releases what a finish could not see, as it always did.
    PERFORM 1 FROM pgq.finished_jobs j
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

COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[], text[], text[], boolean[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies. '
    'group_keys: each job''s group (NULL: none). sequence_keys: each job''s sequence (NULL: none), run after '
    'the key''s previous job; sequence_continue: whether a job failing for good lets its sequence move on.';
