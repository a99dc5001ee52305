-- Revision 0021 down: no scoped role sets, and the advisory locks of revision 0018 again.
-- Revision 0012's pgq.rescue and pgq.mark_awaited, 0016's pgq.enqueue_many, 0017's
-- pgq.enqueue_after, pgq.claim and pgq.settle, 0014's pgq.claim_group_heads and 0018's
-- pgq.enqueue_unique verbatim (same signatures but the walk's: grants stay); row security on
-- pgq.jobs and pgq.key_raises ends with every policy; pgq.lead, pgq.claim_key, pgq.caller_scope,
-- pgq.check_queues and the tables of 0021 go.

DO $policies$
DECLARE
    pol record;
BEGIN
    FOR pol IN SELECT p.policyname, p.tablename FROM pg_policies p
               WHERE p.schemaname = 'pgq' AND p.tablename IN ('jobs', 'key_raises') LOOP
        EXECUTE format('DROP POLICY %I ON pgq.%I', pol.policyname, pol.tablename);
    END LOOP;
END;
$policies$;
ALTER TABLE pgq.jobs DISABLE ROW LEVEL SECURITY;
ALTER TABLE pgq.key_raises DISABLE ROW LEVEL SECURITY;

CREATE OR REPLACE FUNCTION pgq.enqueue_many(
    kinds         text[],
    payloads      jsonb[],
    queues        text[],
    priorities    smallint[],
    run_ats       timestamptz[],
    delays        double precision[],
    dedupe_keys   text[],
    watermarks    bigint[],
    max_attempts  integer[],
    group_keys    text[] DEFAULT NULL
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ids     bigint[];  -- one id reserved per input row
    pend_q  text[];    -- the keys (queue, dedupe_key) not answered yet
    pend_k  text[];
    ans_q   text[] := '{}';  -- the answered keys and their jobs
    ans_k   text[] := '{}';
    ans_id  bigint[] := '{}';
    got_q   text[];
    got_k   text[];
    got_id  bigint[];
    got_wm  bigint[];
    tries   integer := 0;
BEGIN
    IF cardinality(array_remove(dedupe_keys, NULL)) = 0 THEN
        -- No job carries a dedupe key: a plain insert. Ids come from the sequence in input order
        -- (ORDER BY ord), so sorting the returned ids restores the caller's order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited,
                                  group_key)
            SELECT i.kind, coalesce(i.payload, '{}'), coalesce(i.queue, 'default'), coalesce(i.priority, 0),
                   coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()),
                   coalesce(i.max_attempts, 25), i.watermark,
                   i.group_key IS NOT NULL
                   OR i.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r),
                   i.group_key
            FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, watermarks, max_attempts, group_keys)
                 WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, watermark, max_attempts,
                                      group_key, ord)
            ORDER BY i.ord
            RETURNING pgq.jobs.id
        )
        SELECT row_number() OVER (ORDER BY ins.id), ins.id FROM ins;
    ELSE
        -- Every input row reserves an id up front, so a row keeps a stable id whatever the dedupe
        -- below decides (a reserved id that is not used leaves a gap, as rollbacks do).
        ids := ARRAY(SELECT nextval(pg_get_serial_sequence('pgq.jobs', 'id'))
                     FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, watermarks,
                                 max_attempts, group_keys) AS i);
        SELECT coalesce(array_agg(k.queue ORDER BY k.queue, k.dedupe_key), '{}'),
               coalesce(array_agg(k.dedupe_key ORDER BY k.queue, k.dedupe_key), '{}')
        INTO pend_q, pend_k
        FROM (SELECT DISTINCT coalesce(i.queue, 'default') AS queue, i.dedupe_key
              FROM unnest(queues, dedupe_keys) AS i(queue, dedupe_key)
              WHERE i.dedupe_key IS NOT NULL) k;
        LOOP
            tries := tries + 1;
            -- (a) Insert the pending keys whose watermark no run covered yet (and, the first time,
            -- the jobs without a key). A key whose active job exists conflicts and is left alone:
            -- DO NOTHING locks no row (it only waits for a transaction changing that key's index
            -- entry right now: an acknowledgement, or another enqueue of the key).
            WITH input AS (
                SELECT i.ord, i.id, i.kind, coalesce(i.payload, '{}') AS payload,
                       coalesce(i.queue, 'default') AS queue, coalesce(i.priority, 0)::smallint AS priority,
                       coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay),
                                statement_timestamp()) AS run_at,
                       i.dedupe_key, i.watermark, coalesce(i.max_attempts, 25) AS max_attempts, i.group_key
                FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, watermarks,
                            max_attempts, group_keys, ids)
                     WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, dedupe_key, watermark,
                                          max_attempts, group_key, id, ord)
            ),
            keyed AS (
                -- One representative per pending (queue, key) in this call, carrying the highest
                -- watermark given for the key.
                SELECT DISTINCT ON (k.queue, k.dedupe_key) k.ord, k.id, k.kind, k.payload, k.queue, k.priority,
                       k.run_at, k.dedupe_key,
                       max(k.watermark) OVER (PARTITION BY k.queue, k.dedupe_key) AS watermark, k.max_attempts,
                       k.group_key
                FROM input k
                JOIN unnest(pend_q, pend_k) AS p(queue, dedupe_key) ON p.queue = k.queue AND p.dedupe_key = k.dedupe_key
                ORDER BY k.queue, k.dedupe_key, k.ord
            ),
            ins AS (
                INSERT INTO pgq.jobs AS j (id, kind, payload, queue, priority, run_at, dedupe_key,
                                           input_watermark, max_attempts, limited, group_key)
                SELECT n.id, n.kind, n.payload, n.queue, n.priority, n.run_at, n.dedupe_key, n.watermark,
                       n.max_attempts,
                       n.group_key IS NOT NULL
                       OR n.kind IN (SELECT l.kind FROM pgq.concurrency_limits l
                                     UNION ALL SELECT r.kind FROM pgq.rate_limits r),
                       n.group_key
                FROM (
                    SELECT u.ord, u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.dedupe_key,
                           u.watermark, u.max_attempts, u.group_key
                    FROM input u WHERE u.dedupe_key IS NULL AND tries = 1
                    UNION ALL
                    SELECT k.ord, k.id, k.kind, k.payload, k.queue, k.priority, k.run_at, k.dedupe_key,
                           k.watermark, k.max_attempts, k.group_key
                    FROM keyed k
                    WHERE NOT EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                      WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                                        AND w.done_watermark >= k.watermark)
                ) n
                -- Keys in one global order (queue, key), never the caller's: two batches of the same
                -- keys given in opposite orders would otherwise each hold one key's index entry and
                -- wait for the other's (revision 0010).
                ORDER BY n.queue, n.dedupe_key, n.ord
                ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
                DO NOTHING
                RETURNING j.id, j.queue, j.dedupe_key, j.input_watermark
            )
            SELECT coalesce(array_agg(r.queue), '{}'), coalesce(array_agg(r.dedupe_key), '{}'),
                   coalesce(array_agg(r.id), '{}'), coalesce(array_agg(r.input_watermark), '{}')
            INTO got_q, got_k, got_id, got_wm
            FROM ins r
            WHERE r.dedupe_key IS NOT NULL;

            -- (b) A run of the key that finished while (a) looked for a conflict (its
            -- acknowledgement committed after (a)'s snapshot, so (a) read the key's processed
            -- watermark before it) may have covered a watermark just inserted: this statement sees
            -- that acknowledgement. Take such a job back (it is this transaction's own row) and
            -- answer with the run that covered it, as (a) would have had it seen the run.
            IF EXISTS (SELECT 1 FROM unnest(got_wm) AS g(w) WHERE g.w IS NOT NULL) THEN
                WITH undone AS (
                    DELETE FROM pgq.jobs j
                    USING unnest(got_id, got_q, got_k, got_wm) AS g(id, queue, dedupe_key, watermark),
                          pgq.key_watermarks w
                    WHERE j.id = g.id AND w.queue = g.queue AND w.dedupe_key = g.dedupe_key
                      AND w.done_watermark >= g.watermark
                    RETURNING g.id, w.job_id
                )
                SELECT ARRAY(SELECT coalesce(u.job_id, g.id)
                             FROM unnest(got_id) WITH ORDINALITY AS g(id, n)
                             LEFT JOIN undone u ON u.id = g.id
                             ORDER BY g.n)
                INTO got_id;
            END IF;
            ans_q := ans_q || got_q;
            ans_k := ans_k || got_k;
            ans_id := ans_id || got_id;
            SELECT coalesce(array_agg(p.queue ORDER BY p.queue, p.dedupe_key), '{}'),
                   coalesce(array_agg(p.dedupe_key ORDER BY p.queue, p.dedupe_key), '{}')
            INTO pend_q, pend_k
            FROM unnest(pend_q, pend_k) AS p(queue, dedupe_key)
            WHERE NOT EXISTS (SELECT 1 FROM unnest(got_q, got_k) AS g(queue, dedupe_key)
                              WHERE g.queue = p.queue AND g.dedupe_key = p.dedupe_key);
            EXIT WHEN cardinality(pend_q) = 0;

            -- (c) The other keys, in a newer snapshot: a run that covered the watermark answers; else
            -- the active job does, and a watermark above its input_watermark becomes a raise (a row
            -- of pgq.key_raises: the job is not written). A key with neither (its job finished since
            -- (a)) is tried again.
            WITH input AS (
                SELECT i.ord, i.kind, coalesce(i.payload, '{}') AS payload,
                       coalesce(i.queue, 'default') AS queue, coalesce(i.priority, 0)::smallint AS priority,
                       coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay),
                                statement_timestamp()) AS run_at,
                       i.dedupe_key, i.watermark, coalesce(i.max_attempts, 25) AS max_attempts, i.group_key
                FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, watermarks,
                            max_attempts, group_keys)
                     WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, dedupe_key, watermark,
                                          max_attempts, group_key, ord)
            ),
            keyed AS (
                SELECT DISTINCT ON (k.queue, k.dedupe_key) k.kind, k.payload, k.queue, k.priority, k.run_at,
                       k.dedupe_key, max(k.watermark) OVER (PARTITION BY k.queue, k.dedupe_key) AS watermark,
                       k.max_attempts, k.group_key
                FROM input k
                JOIN unnest(pend_q, pend_k) AS p(queue, dedupe_key) ON p.queue = k.queue AND p.dedupe_key = k.dedupe_key
                ORDER BY k.queue, k.dedupe_key, k.ord
            ),
            found AS (
                SELECT k.*,
                       (SELECT w.job_id FROM pgq.key_watermarks w
                        WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                          AND w.done_watermark >= k.watermark) AS done_job,
                       a.id AS active_id, a.input_watermark AS active_watermark
                FROM keyed k
                LEFT JOIN pgq.jobs a ON a.queue = k.queue AND a.dedupe_key = k.dedupe_key
                                    AND a.dedupe_key IS NOT NULL AND a.status IN ('queued', 'running')
            ),
            raised AS (
                INSERT INTO pgq.key_raises (queue, dedupe_key, watermark, job_id, kind, payload, priority, run_at,
                                            max_attempts, group_key)
                SELECT f.queue, f.dedupe_key, f.watermark, f.active_id, f.kind, f.payload, f.priority, f.run_at,
                       f.max_attempts, f.group_key
                FROM found f
                WHERE f.done_job IS NULL AND f.active_id IS NOT NULL AND f.watermark IS NOT NULL
                  AND (f.active_watermark IS NULL OR f.watermark > f.active_watermark)
                ORDER BY f.queue, f.dedupe_key
            )
            SELECT coalesce(array_agg(f.queue), '{}'), coalesce(array_agg(f.dedupe_key), '{}'),
                   coalesce(array_agg(coalesce(f.done_job, f.active_id)), '{}')
            INTO got_q, got_k, got_id
            FROM found f
            WHERE coalesce(f.done_job, f.active_id) IS NOT NULL;
            ans_q := ans_q || got_q;
            ans_k := ans_k || got_k;
            ans_id := ans_id || got_id;
            SELECT coalesce(array_agg(p.queue ORDER BY p.queue, p.dedupe_key), '{}'),
                   coalesce(array_agg(p.dedupe_key ORDER BY p.queue, p.dedupe_key), '{}')
            INTO pend_q, pend_k
            FROM unnest(pend_q, pend_k) AS p(queue, dedupe_key)
            WHERE NOT EXISTS (SELECT 1 FROM unnest(got_q, got_k) AS g(queue, dedupe_key)
                              WHERE g.queue = p.queue AND g.dedupe_key = p.dedupe_key);
            EXIT WHEN cardinality(pend_q) = 0;
            -- Each further round needs a job of the key to finish between two statements of this one.
            IF tries >= 10 THEN
                RAISE EXCEPTION 'pgq.enqueue_many: the active job of dedupe key % in queue % kept finishing '
                                'while it was enqueued; try again', pend_k[1], pend_q[1]
                    USING ERRCODE = 'serialization_failure';
            END IF;
        END LOOP;

        RETURN QUERY
        SELECT i.ord, CASE WHEN i.dedupe_key IS NULL THEN i.id ELSE a.id END
        FROM unnest(queues, dedupe_keys, ids) WITH ORDINALITY AS i(queue, dedupe_key, id, ord)
        LEFT JOIN unnest(ans_q, ans_k, ans_id) AS a(queue, dedupe_key, id)
          ON a.queue = coalesce(i.queue, 'default') AND a.dedupe_key = i.dedupe_key
        ORDER BY i.ord;
    END IF;

    -- Wake idle workers: one notification per queue. Postgres also folds identical notifications
    -- of one transaction into one, so a batch of 100,000 jobs sends a handful of short messages.
    -- A queue name too long for a NOTIFY payload (8000 bytes) wakes every worker ('*').
    PERFORM pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)
    FROM (SELECT DISTINCT coalesce(x, 'default') AS queue FROM unnest(queues) AS x) q;
END;
$fn$;

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

CREATE OR REPLACE FUNCTION pgq.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text, queue text, kind text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    ids      bigint[];
    statuses text[];
    names    text[];
    kinds    text[];
    n_woke   bigint;
BEGIN
    WITH expired AS (
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    rescued AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = now(),
            last_error = 'lease expired at ' || j.lease_expires_at::text
                         || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
        FROM expired e
        WHERE j.id = e.id
        RETURNING j.id, j.status, j.queue, j.kind
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
    )
    SELECT array_agg(r.id ORDER BY r.id), array_agg(r.status::text ORDER BY r.id),
           array_agg(r.queue ORDER BY r.id), array_agg(r.kind ORDER BY r.id), (SELECT w.n FROM wake w)
    INTO ids, statuses, names, kinds, n_woke
    FROM rescued r;
    RETURN QUERY SELECT r.id, r.status, r.queue, r.kind, n_woke
                 FROM unnest(ids, statuses, names, kinds) AS r(id, status, queue, kind);
    PERFORM pgq.after_finish(ids);
    PERFORM pgq.settle(1000);
END;
$fn$;

CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH marked AS (
        INSERT INTO pgq.awaited_jobs (job_id)
        SELECT j.id FROM pgq.jobs j
        WHERE j.id = mark_awaited.job_id AND j.status::text IN ('waiting', 'queued', 'running')
        ON CONFLICT DO NOTHING
        RETURNING awaited_jobs.job_id
    )
    SELECT j.* FROM pgq.jobs j JOIN marked m ON m.job_id = j.id;
$fn$;

DROP FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[], text);
CREATE FUNCTION pgq.claim_group_heads(wanted text[], kind_name text, key text, prio smallint, n integer,
                                       skip bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- as pgq.claim's: its ORDER BY names the index
AS $fn$
BEGIN
    IF key IS NULL THEN
        RETURN ARRAY(
            SELECT y.id
            FROM unnest(wanted) AS w(name)
            CROSS JOIN LATERAL (
                SELECT c.id, c.priority, c.run_at
                FROM (SELECT j.id, j.priority, j.run_at FROM pgq.jobs j
                      WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = kind_name
                        AND j.group_key IS NULL AND j.priority = prio AND j.run_at <= now()
                      -- jobs_claim_group_idx's order (the key and priority are fixed): the way in is
                      -- that index, never jobs_claim_limited_idx filtering the kind's other groups.
                      ORDER BY j.group_key, j.priority, j.run_at, j.id
                      OFFSET 0) c  -- keeps the reservation below out of the scan's filter
                WHERE c.id <> ALL(skip) AND pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
                LIMIT n) y
            ORDER BY y.priority, y.run_at, y.id
            LIMIT n);
    END IF;
    RETURN ARRAY(
        SELECT y.id
        FROM unnest(wanted) AS w(name)
        CROSS JOIN LATERAL (
            SELECT c.id, c.priority, c.run_at
            FROM (SELECT j.id, j.priority, j.run_at FROM pgq.jobs j
                  WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = kind_name
                    AND j.group_key = key AND j.priority = prio AND j.run_at <= now()
                  ORDER BY j.group_key, j.priority, j.run_at, j.id
                  OFFSET 0) c
            WHERE c.id <> ALL(skip) AND pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
            LIMIT n) y
        ORDER BY y.priority, y.run_at, y.id
        LIMIT n);
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]) IS
    'Reserve up to n head jobs of one group of a kind for pgq.claim (its walk over groups); returns their '
    'ids. Internal: granted to no role.';

CREATE OR REPLACE FUNCTION pgq.claim(
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
    finished_at timestamptz, progress jsonb, group_key text, sequence_key text
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
                  j.started_at, j.finished_at, j.progress, j.group_key, j.sequence_key
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
           c.group_key, c.sequence_key
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

CREATE OR REPLACE FUNCTION pgq.enqueue_unique(
    kinds         text[],
    payloads      jsonb[],
    queues        text[],
    priorities    smallint[],
    run_ats       timestamptz[],
    delays        double precision[],
    dedupe_keys   text[],
    max_attempts  integer[],
    group_keys    text[],
    unique_fors   double precision[],
    replaces      boolean[],
    debounces     double precision[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r       record;
    jid     bigint;
    run_id  bigint;
    when_at timestamptz;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(dedupe_keys, unique_fors, replaces, debounces, run_ats, delays)
                             AS i(k, u, rp, d, ra, dl)
               WHERE i.k IS NULL OR i.k = '' OR i.u <= 0 OR i.d <= 0 OR i.u > 31 * 86400
                  OR (i.u IS NOT NULL AND (coalesce(i.rp, false) OR i.d IS NOT NULL))
                  OR (i.d IS NOT NULL AND (i.ra IS NOT NULL OR i.dl IS NOT NULL))
                  OR (i.u IS NULL AND NOT coalesce(i.rp, false) AND i.d IS NULL)) THEN
        RAISE EXCEPTION 'pgq.enqueue_unique: each job needs a dedupe_key and one of unique_for (> 0, <= 31 days), replace '
                        'or debounce (> 0, without run_at or delay); unique_for not with replace or debounce'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Each key's producers one at a time: a lock per slot of 256 the keys hash onto, in slot order
    -- (no deadlock between batches). Slots, not keys: each lock is an entry of PostgreSQL's shared
    -- lock table, which a batch of thousands of keys would exhaust ("out of shared memory"); keys
    -- sharing a slot only make their producers wait for each other.
    PERFORM pg_advisory_xact_lock(1885827429, k.slot)  -- (1885827428: the settle)
    FROM (SELECT DISTINCT hashtext(coalesce(i.q, 'default') || chr(31) || i.k) & 255 AS slot
          FROM unnest(queues, dedupe_keys) AS i(q, k)) k
    ORDER BY k.slot;
    FOR r IN
        SELECT i.n, i.kind, coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority, i.run_at, i.delay, i.dedupe_key,
               i.max_attempts, i.group_key, i.unique_for, coalesce(i.repl, false) OR i.debounce IS NOT NULL AS repl,
               i.debounce
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, max_attempts, group_keys,
                    unique_fors, replaces, debounces)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, dedupe_key, max_attempts,
                                  group_key, unique_for, repl, debounce, n)
        ORDER BY i.n
    LOOP
        when_at := coalesce(r.run_at, statement_timestamp() + make_interval(secs => r.debounce),
                            statement_timestamp() + make_interval(secs => r.delay), statement_timestamp());
        jid := NULL;
        FOR attempt IN 1..10 LOOP
            IF r.repl THEN
                -- The key's newest job not started yet (a waiting one behind a running job comes
                -- after it); a row a claim took meanwhile is running now, and left alone.
                UPDATE pgq.jobs j SET payload = r.payload, priority = r.priority, run_at = when_at
                WHERE j.id = (SELECT p.id FROM pgq.jobs p
                              WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key
                                AND p.status IN ('waiting', 'queued')
                              ORDER BY p.id DESC LIMIT 1)
                  AND j.status IN ('waiting', 'queued')
                RETURNING j.id INTO jid;
                EXIT WHEN jid IS NOT NULL;
                SELECT p.id INTO run_id FROM pgq.jobs p
                WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key AND p.status = 'running';
                IF run_id IS NOT NULL THEN
                    -- Behind the running job: waits on it, runs once it finished, whatever its outcome.
                    -- Should that job finish (or go back to queued) before pgq.enqueue_after locks it,
                    -- the new job can come out queued beside another active job of the key (a plain
                    -- enqueue, a retry): then this attempt is undone and the key looked at again.
                    BEGIN
                        SELECT e.id INTO jid FROM pgq.enqueue_after(
                            ARRAY[r.kind], ARRAY[r.payload], ARRAY[r.queue], ARRAY[r.priority], ARRAY[when_at],
                            ARRAY[NULL::double precision], ARRAY[r.max_attempts], ARRAY[true], ARRAY[1],
                            ARRAY[run_id], ARRAY[r.group_key]) AS e;
                        UPDATE pgq.jobs j SET dedupe_key = r.dedupe_key WHERE j.id = jid;
                    EXCEPTION WHEN unique_violation THEN
                        jid := NULL;
                    END;
                    EXIT WHEN jid IS NOT NULL;
                    CONTINUE;
                END IF;
            ELSE
                -- unique_for: an active job of the key, else its newest finish within the window.
                SELECT p.id INTO jid FROM pgq.jobs p
                WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key
                  AND (p.status IN ('waiting', 'queued', 'running')
                       OR p.finished_at > statement_timestamp() - make_interval(secs => r.unique_for))
                ORDER BY p.finished_at DESC NULLS FIRST, p.id DESC LIMIT 1;
                EXIT WHEN jid IS NOT NULL;
                SELECT f.job_id INTO jid FROM pgq.key_finishes f
                WHERE f.queue = r.queue AND f.dedupe_key = r.dedupe_key
                  AND f.finished_at > statement_timestamp() - make_interval(secs => r.unique_for);
                EXIT WHEN jid IS NOT NULL;
            END IF;
            -- No job of the key: a new one. A plain enqueue (pgq.enqueue_many) of the key may have
            -- added its active job meanwhile: then look again.
            INSERT INTO pgq.jobs AS j (kind, payload, queue, priority, run_at, dedupe_key, max_attempts, limited,
                                       group_key)
            VALUES (r.kind, r.payload, r.queue, r.priority, when_at, r.dedupe_key, coalesce(r.max_attempts, 25),
                    r.group_key IS NOT NULL
                    OR r.kind IN (SELECT l.kind FROM pgq.concurrency_limits l
                                  UNION ALL SELECT t.kind FROM pgq.rate_limits t),
                    r.group_key)
            ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
            DO NOTHING
            RETURNING j.id INTO jid;
            IF jid IS NOT NULL THEN
                PERFORM pg_notify('pgq', CASE WHEN octet_length(r.queue) <= 1000 THEN r.queue ELSE '*' END);
                EXIT;
            END IF;
        END LOOP;
        IF jid IS NULL THEN
            RAISE EXCEPTION 'pgq.enqueue_unique: the key % kept changing', r.dedupe_key
                USING ERRCODE = 'serialization_failure';
        END IF;
        ord := r.n;
        id := jid;
        RETURN NEXT;
    END LOOP;
END;
$fn$;

DROP FUNCTION pgq.lead(text);
DROP FUNCTION pgq.claim_key(text, bigint, integer, timestamptz);
DROP TABLE pgq.leaders;
DROP TABLE pgq.claim_secret;
DROP TABLE pgq.unique_locks;
DROP FUNCTION pgq.check_queues(text[], bigint[]);
DROP FUNCTION pgq.caller_scope();
DROP TABLE pgq.role_scopes;
