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
    -- A producer of a scoped role set enqueues in its queues only (revision 0021).
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        PERFORM pgq.check_queues(queues);
    END IF;
    IF cardinality(array_remove(dedupe_keys, NULL)) = 0 THEN
        -- No job carries a dedupe key: a plain insert. Ids come from the sequence in input order
        -- (ORDER BY ord), so sorting the returned ids restores the caller's order.
        -- Revision 0033: new jobs go straight to pgq.live_jobs, the partition of pgq.jobs they
        -- belong in (no routing through the parent), and every read below of an active job reads it.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO pgq.live_jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited,
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
            RETURNING pgq.live_jobs.id
        )
        SELECT row_number() OVER (ORDER BY ins.id), ins.id FROM ins;
    ELSE
        -- Every input row reserves an id up front, so a row keeps a stable id whatever the dedupe
        -- below decides (a reserved id that is not used leaves a gap, as rollbacks do).
        ids := ARRAY(SELECT nextval('pgq.jobs_id_seq')
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
                INSERT INTO pgq.live_jobs AS j (id, kind, payload, queue, priority, run_at, dedupe_key,
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
                    DELETE FROM pgq.live_jobs j
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
                LEFT JOIN pgq.live_jobs a ON a.queue = k.queue AND a.dedupe_key = k.dedupe_key
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

COMMENT ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                     text[], bigint[], integer[], text[]) IS
    'Enqueue a batch given as parallel arrays; returns (ord, id) per input element, in input order. '
    'A dedupe_key already active in its queue returns the active job (a higher watermark is recorded in '
    'pgq.key_raises: the job is not locked); a watermark already processed for the key returns the job '
    'that processed it. group_keys: each job''s group (NULL: none).';
