-- pgq schema, revision 0016: a keyed enqueue locks no existing job (issue 30).
--
-- Until now pgq.enqueue_many with dedupe keys wrote the active job of each key, inside the caller's
-- transaction: `ON CONFLICT ... DO UPDATE SET input_watermark = greatest(...)` row-locked it, and
-- with watermarks a `FOR UPDATE` of those jobs came first. A producer that sat in its transaction
-- held the job until it ended: claims skipped it, its worker's acknowledgements and heartbeats came
-- back busy, an admin's cancel waited. Any producer may read pgq.jobs, so a hostile one could hold
-- every keyed job.
--
-- Now a keyed enqueue only inserts:
--   * `ON CONFLICT ... DO NOTHING` (which locks nothing it conflicts with), then a following
--     statement (a newer snapshot) looks up the active job of each key that conflicted; a key whose
--     job finished in between is inserted again (a bounded loop). Keys still go in one global order.
--   * A watermark above the active job's input_watermark becomes a row of pgq.key_raises (the key,
--     the watermark, the job it was meant for, and the enqueue's own job columns), not an update of
--     the job. The answer is the active job, as before.
--   * A watermark insert that a finishing run covered after the insert statement's snapshot (that
--     run's acknowledgement committed while the insert looked for a conflict) is taken back in the
--     next statement, which sees pgq.key_watermarks as it is now: the job the enqueue inserted is
--     its own, uncommitted, so deleting it touches nobody's row. This replaces the FOR UPDATE that
--     made the enqueue wait for such an acknowledgement.
--
-- Who applies a raise:
--   * the completion (pgq.complete_core, complete_skip_core): a keyed job's effective input
--     watermark is greatest(input_watermark, the raises of its key it can see); above the watermark
--     the run processed, the job is queued again (the dirty re-run) carrying it. One probe of
--     key_raises_key_idx per keyed row; an unkeyed row does not reach it (a CASE branch).
--   * pgq.settle (every worker, each second, one at a time), through pgq.settle_raises: deletes
--     the raises a successful run covered (done_watermark), folds the others into the key's active
--     job (queued or running; short row locks of its own, SKIP LOCKED), and for a key with no active
--     job does what the enqueue would have done after the job finished: a new job, with the
--     enqueue's columns and the highest raised watermark, unless a run covered it. A raise meant for
--     a job that failed or was cancelled for good is dropped if it was written before that finish
--     (as the old lock made that finish wait for the enqueue and fail the raised job), and runs
--     otherwise.
-- A raise committed after its job's completion (the completion could not see it) so runs about a
-- second later, as a new job, instead of making the enqueue wait for that completion.

CREATE TABLE pgq.key_raises (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text NOT NULL,
    dedupe_key   text NOT NULL,
    watermark    bigint NOT NULL,
    job_id       bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    priority     smallint NOT NULL,
    run_at       timestamptz NOT NULL,
    max_attempts integer NOT NULL,
    group_key    text
);
-- The completion's probe (the highest raise of a key) and the settle's walk over keys.
CREATE INDEX key_raises_key_idx ON pgq.key_raises (queue, dedupe_key, watermark);
COMMENT ON TABLE pgq.key_raises IS
    'Watermarks enqueued for a dedupe key while a job of the key was active, not yet applied to it: '
    'insert-only for producers (pgq.enqueue_many), applied by completions and pgq.settle (revision 0016).';
COMMENT ON COLUMN pgq.key_raises.id IS 'Order of the raises.';
COMMENT ON COLUMN pgq.key_raises.queue IS 'Queue of the key.';
COMMENT ON COLUMN pgq.key_raises.dedupe_key IS 'The dedupe key.';
COMMENT ON COLUMN pgq.key_raises.watermark IS 'The watermark enqueued.';
COMMENT ON COLUMN pgq.key_raises.job_id IS 'The active job the enqueue found (and answered with).';
COMMENT ON COLUMN pgq.key_raises.at IS 'When the raise was written (database clock).';
COMMENT ON COLUMN pgq.key_raises.kind IS 'The enqueue''s kind: of the job the settle inserts if the key''s job finished.';
COMMENT ON COLUMN pgq.key_raises.payload IS 'The enqueue''s payload (likewise).';
COMMENT ON COLUMN pgq.key_raises.priority IS 'The enqueue''s priority (likewise).';
COMMENT ON COLUMN pgq.key_raises.run_at IS 'The enqueue''s run_at (likewise).';
COMMENT ON COLUMN pgq.key_raises.max_attempts IS 'The enqueue''s max_attempts (likewise).';
COMMENT ON COLUMN pgq.key_raises.group_key IS 'The enqueue''s group key (likewise).';

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
COMMENT ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                     text[], bigint[], integer[], text[]) IS
    'Enqueue a batch given as parallel arrays; returns (ord, id) per input element, in input order. '
    'A dedupe_key already active in its queue returns the active job (a higher watermark is recorded in '
    'pgq.key_raises: the job is not locked); a watermark already processed for the key returns the job '
    'that processed it. group_keys: each job''s group (NULL: none).';


-- The highest raise of a key that this statement sees (NULL: none): one probe of key_raises_key_idx.
CREATE FUNCTION pgq.key_raised(p_queue text, p_dedupe_key text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT max(r.watermark) FROM pgq.key_raises r WHERE r.queue = p_queue AND r.dedupe_key = p_dedupe_key
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.key_raised(text, text) FROM PUBLIC;
COMMENT ON FUNCTION pgq.key_raised(text, text) IS
    'The highest watermark raised for a dedupe key and not applied yet (pgq.key_raises); NULL if none. '
    'Internal: granted to no role.';

-- The completions: a keyed job's effective input watermark is greatest(input_watermark, the highest
-- raise of its key the statement sees). The dirty re-run compares it with the watermark the run
-- processed and, queuing the job again, stores it in input_watermark (the next claim hands it to the
-- worker). Otherwise revision 0011's bodies (renamed *_core by revision 0012). The raise probe sits
-- behind `j.dedupe_key IS NOT NULL` (and the CASE branch of keyed rows): a batch of unkeyed jobs
-- evaluates what it evaluated before.
CREATE OR REPLACE FUNCTION pgq.complete_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                             p_watermarks bigint[], p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token, d.result, d.watermark, d.progress
        FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
             AS d(id, token, result, watermark, progress)
        ORDER BY d.id
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END,
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                   OR (j.dedupe_key IS NOT NULL
                                       AND pgq.key_raised(j.queue, j.dedupe_key)
                                           > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                      OR (j.dedupe_key IS NOT NULL
                                          AND pgq.key_raised(j.queue, j.dedupe_key)
                                              > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                               THEN NULL ELSE now() END
        FROM done d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
    )
    SELECT f.id, f.status::text, (SELECT w.n FROM wake w)
    FROM finished f;
END;
$fn$;
CREATE OR REPLACE FUNCTION pgq.complete_skip_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                                  p_watermarks bigint[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token
        FROM unnest(p_ids, p_tokens) AS d(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END,
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                   OR (j.dedupe_key IS NOT NULL
                                       AND pgq.key_raised(j.queue, j.dedupe_key)
                                           > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                      OR (j.dedupe_key IS NOT NULL
                                          AND pgq.key_raised(j.queue, j.dedupe_key)
                                              > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                               THEN NULL ELSE now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
                 AS u(id, token, result, watermark, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
    )
    SELECT f.id, f.status::text, (SELECT w.n FROM wake w)
    FROM finished f
    UNION ALL
    SELECT b.id, NULL::text, NULL::bigint FROM busy b
    WHERE NOT p_wait;
END;
$fn$;

-- The raises' share of the settle, under pgq.settle's advisory lock (one at a time). Up to lim keys
-- per step:
--   (1) raises a successful run covered (done_watermark >= watermark) are deleted;
--   (2) the others of a key with an active job are folded into it: input_watermark raised, short
--       row locks of the settle's own (SKIP LOCKED: a row some transaction holds waits for the next
--       settle), then deleted;
--   (3) a key with neither lost its job since the raise was written: the raise was meant for a job
--       that finished. A raise for a job that failed or was cancelled for good, written before that
--       finish, is dropped (the old lock made that finish wait for the enqueue: the job failed with
--       the raised watermark and nothing ran it). Any other (the job succeeded without seeing it, or
--       it was written after the finish, or the job is gone) is what an enqueue finding no active job
--       does: a new job, with the enqueue's columns and the key's highest such watermark, unless a
--       run covered it by then. That insert waits at most wait_ms for another transaction inserting
--       the key (a producer's open enqueue); past that, the key waits for the next settle.
-- Returns how many raises it applied or deleted.
CREATE FUNCTION pgq.settle_raises(lim integer, wait_ms integer DEFAULT 100) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n       integer := 0;
    m       integer;
    k       record;
    new_id  bigint;
    timeout text := current_setting('lock_timeout');
BEGIN
    WITH gone AS (
        DELETE FROM pgq.key_raises x
        WHERE x.id = ANY(ARRAY(SELECT r.id FROM pgq.key_raises r
                               JOIN pgq.key_watermarks w ON w.queue = r.queue AND w.dedupe_key = r.dedupe_key
                               WHERE w.done_watermark >= r.watermark
                               LIMIT lim))
        RETURNING 1
    )
    SELECT count(*) INTO m FROM gone;
    n := n + m;

    WITH raised AS (
        SELECT r.queue, r.dedupe_key, max(r.watermark) AS watermark
        FROM pgq.key_raises r
        WHERE EXISTS (SELECT 1 FROM pgq.jobs a
                      WHERE a.queue = r.queue AND a.dedupe_key = r.dedupe_key AND a.status IN ('queued', 'running'))
        GROUP BY r.queue, r.dedupe_key
        ORDER BY r.queue, r.dedupe_key
        LIMIT lim
    ),
    target AS (
        SELECT a.id, x.watermark
        FROM pgq.jobs a JOIN raised x ON a.queue = x.queue AND a.dedupe_key = x.dedupe_key
        WHERE a.status IN ('queued', 'running')
        ORDER BY a.id
        FOR NO KEY UPDATE OF a SKIP LOCKED
    ),
    folded AS (
        UPDATE pgq.jobs j SET input_watermark = greatest(j.input_watermark, t.watermark)
        FROM target t
        WHERE j.id = t.id AND j.status IN ('queued', 'running')
        RETURNING j.queue, j.dedupe_key, j.input_watermark
    ),
    gone AS (
        DELETE FROM pgq.key_raises x
        USING folded f
        WHERE x.queue = f.queue AND x.dedupe_key = f.dedupe_key AND x.watermark <= f.input_watermark
        RETURNING 1
    )
    SELECT count(*) INTO m FROM gone;
    n := n + m;

    FOR k IN
        SELECT r.queue, r.dedupe_key, array_agg(r.id) AS ids,
               max(r.watermark) FILTER (WHERE NOT r.absorbed) AS watermark,
               (array_agg(r.id ORDER BY r.watermark DESC, r.id DESC) FILTER (WHERE NOT r.absorbed))[1] AS top_id
        FROM (SELECT x.id, x.queue, x.dedupe_key, x.watermark,
                     coalesce((SELECT f.status IN ('failed', 'cancelled') AND x.at < f.finished_at
                               FROM pgq.jobs f WHERE f.id = x.job_id), false) AS absorbed
              FROM pgq.key_raises x
              WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs a
                                WHERE a.queue = x.queue AND a.dedupe_key = x.dedupe_key
                                  AND a.status IN ('queued', 'running'))) r
        GROUP BY r.queue, r.dedupe_key
        ORDER BY r.queue, r.dedupe_key
        LIMIT lim
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', wait_ms::text || 'ms', true);
            IF k.top_id IS NOT NULL THEN
                -- A new job, unless a run covered the watermark by now or a job of the key became
                -- active (then the next settle folds the raises into it: nothing is deleted here).
                WITH ins AS (
                    INSERT INTO pgq.jobs AS j (kind, payload, queue, priority, run_at, dedupe_key, input_watermark,
                                               max_attempts, limited, group_key)
                    SELECT t.kind, t.payload, t.queue, t.priority, t.run_at, t.dedupe_key, k.watermark,
                           t.max_attempts,
                           t.group_key IS NOT NULL
                           OR t.kind IN (SELECT l.kind FROM pgq.concurrency_limits l
                                         UNION ALL SELECT r.kind FROM pgq.rate_limits r),
                           t.group_key
                    FROM pgq.key_raises t
                    WHERE t.id = k.top_id
                      AND NOT EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                      WHERE w.queue = t.queue AND w.dedupe_key = t.dedupe_key
                                        AND w.done_watermark >= k.watermark)
                    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
                    DO NOTHING
                    RETURNING j.id, j.queue
                )
                SELECT count(pg_notify('pgq', CASE WHEN octet_length(i.queue) <= 1000 THEN i.queue ELSE '*' END)),
                       max(i.id)
                INTO m, new_id FROM ins i;
                -- The run whose completion the insert's conflict check waited for (or that committed
                -- after this statement's snapshot) may have covered the watermark: this statement's
                -- newer snapshot sees it, and the new job is taken back, as pgq.enqueue_many does.
                IF new_id IS NOT NULL AND EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                                  WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                                                    AND w.done_watermark >= k.watermark) THEN
                    DELETE FROM pgq.jobs j WHERE j.id = new_id;
                END IF;
                IF m = 0 AND NOT EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                         WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                                           AND w.done_watermark >= k.watermark) THEN
                    CONTINUE;
                END IF;
            END IF;
            DELETE FROM pgq.key_raises x
            WHERE x.id = ANY(k.ids);  -- those read above: one committed since is left to the next settle
            GET DIAGNOSTICS m = ROW_COUNT;
            n := n + m;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- another transaction is inserting the key: the next settle sees what it did
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', timeout, true);
    RETURN n;
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.settle_raises(integer, integer) FROM PUBLIC;
COMMENT ON FUNCTION pgq.settle_raises(integer, integer) IS
    'Apply the raises (pgq.key_raises) of up to lim keys: delete those a run covered, fold the others into '
    'the key''s active job, or enqueue the run a finished job did not make. Called by pgq.settle; '
    'internal: granted to no role.';

-- The settle applies the raises too (revision 0012's body, and pgq.settle_raises).
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
COMMENT ON FUNCTION pgq.settle(integer) IS
    'Settle up to lim finished parents with open edges and lim waits of finished jobs that their '
    'finish did not see (the producer committed later), and the raises of up to lim keys '
    '(pgq.settle_raises); workers run it each second, and the rescue. Returns how many (0 when another '
    'settle holds its lock).';

-- The claim folds the raises of the keys it claims (the one change to revision 0014's body: an
-- assignment in its UPDATE, whose CASE runs the probe for keyed rows only). A raise committed after
-- the claim is left to the completion's dirty re-run, as a raise of the job's input_watermark was.
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
