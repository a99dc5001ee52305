CREATE OR REPLACE FUNCTION pgq.enqueue_many(
    kinds         text[],
    payloads      jsonb[],
    queues        text[],
    priorities    smallint[],
    run_ats       timestamptz[],
    delays        double precision[],
    dedupe_keys   text[],
    watermarks    bigint[],
    max_attempts  integer[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF cardinality(array_remove(dedupe_keys, NULL)) = 0 THEN
        -- No job carries a dedupe key: a plain insert. Ids come from the sequence in input order
        -- (ORDER BY ord), so sorting the returned ids restores the caller's order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited)
            SELECT i.kind, coalesce(i.payload, '{}'), coalesce(i.queue, 'default'), coalesce(i.priority, 0),
                   coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()),
                   coalesce(i.max_attempts, 25), i.watermark,
                   i.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r)
            FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, watermarks, max_attempts)
                 WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, watermark, max_attempts, ord)
            ORDER BY i.ord
            RETURNING pgq.jobs.id
        )
        SELECT row_number() OVER (ORDER BY ins.id), ins.id FROM ins;
    ELSE
        IF cardinality(array_remove(watermarks, NULL)) > 0 THEN
            -- Wait for any acknowledgement in flight of an active job holding one of these keys, and
            -- keep new ones out until this transaction ends: lock those rows first, in id order (the
            -- order job_complete locks them), then decide in the statement below, whose snapshot is
            -- newer than the lock. Without this, a run finishing between that statement's snapshot
            -- and its insert freed the key unseen: the insert then created a second run of input
            -- the finished run had already processed (its watermark was not yet in key_watermarks).
            PERFORM 1
            FROM pgq.jobs j
            JOIN (SELECT DISTINCT coalesce(i.queue, 'default') AS queue, i.dedupe_key
                  FROM unnest(queues, dedupe_keys) AS i(queue, dedupe_key)
                  WHERE i.dedupe_key IS NOT NULL) k
              ON j.queue = k.queue AND j.dedupe_key = k.dedupe_key
            WHERE j.status IN ('queued', 'running')
            ORDER BY j.id
            FOR UPDATE OF j;
        END IF;
        RETURN QUERY
        WITH input AS (
            -- Every input row reserves an id up front, so a row keeps a stable id whatever the
            -- dedupe below decides (a reserved id that is not used leaves a gap, as rollbacks do).
            SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id,
                   i.kind, coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
                   coalesce(i.priority, 0)::smallint AS priority,
                   coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()) AS run_at,
                   i.dedupe_key, i.watermark, coalesce(i.max_attempts, 25) AS max_attempts
            FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, dedupe_keys, watermarks,
                        max_attempts)
                 WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, dedupe_key, watermark,
                                      max_attempts, ord)
        ),
        keyed AS (
            -- One representative per (queue, key) in this call: ON CONFLICT may touch a row only
            -- once per statement. It carries the highest watermark given for the key.
            SELECT DISTINCT ON (k.queue, k.dedupe_key) k.ord, k.id, k.kind, k.payload, k.queue, k.priority,
                   k.run_at, k.dedupe_key,
                   max(k.watermark) OVER (PARTITION BY k.queue, k.dedupe_key) AS watermark, k.max_attempts
            FROM input k
            WHERE k.dedupe_key IS NOT NULL
            ORDER BY k.queue, k.dedupe_key, k.ord
        ),
        processed AS (
            -- Input a successful run already covered: enqueue nothing, answer with that run's job.
            SELECT k.queue, k.dedupe_key, w.job_id
            FROM keyed k
            JOIN pgq.key_watermarks w ON w.queue = k.queue AND w.dedupe_key = k.dedupe_key
            WHERE k.watermark IS NOT NULL AND w.done_watermark >= k.watermark
        ),
        ins AS (
            INSERT INTO pgq.jobs AS j (id, kind, payload, queue, priority, run_at, dedupe_key,
                                       input_watermark, max_attempts, limited)
            SELECT n.id, n.kind, n.payload, n.queue, n.priority, n.run_at, n.dedupe_key, n.watermark,
                   n.max_attempts,
                   n.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r)
            FROM (
                SELECT u.ord, u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.dedupe_key,
                       u.watermark, u.max_attempts
                FROM input u WHERE u.dedupe_key IS NULL
                UNION ALL
                SELECT k.ord, k.id, k.kind, k.payload, k.queue, k.priority, k.run_at, k.dedupe_key,
                       k.watermark, k.max_attempts
                FROM keyed k
                WHERE NOT EXISTS (SELECT 1 FROM processed p
                                  WHERE p.queue = k.queue AND p.dedupe_key = k.dedupe_key)
            ) n
            -- Keys in one global order (queue, key), never the caller's: two batches of the same keys
            -- given in opposite orders would otherwise each hold one key's index entry and wait for
            -- the other's (revision 0010).
            ORDER BY n.queue, n.dedupe_key, n.ord
            -- An active job holds the key: keep it, and raise its input watermark monotonically.
            -- If it is running, the raised watermark makes its completion re-queue it (dirty re-run).
            ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
            DO UPDATE SET input_watermark = greatest(j.input_watermark, excluded.input_watermark)
            RETURNING j.id, j.queue, j.dedupe_key
        )
        SELECT u.ord,
               CASE WHEN u.dedupe_key IS NULL THEN u.id
                    ELSE coalesce(
                        (SELECT p.job_id FROM processed p WHERE p.queue = u.queue AND p.dedupe_key = u.dedupe_key),
                        (SELECT r.id FROM ins r WHERE r.queue = u.queue AND r.dedupe_key = u.dedupe_key))
               END
        FROM input u
        ORDER BY u.ord;
    END IF;

    -- Wake idle workers: one notification per queue. Postgres also folds identical notifications
    -- of one transaction into one, so a batch of 100,000 jobs sends a handful of short messages.
    -- A queue name too long for a NOTIFY payload (8000 bytes) wakes every worker ('*').
    PERFORM pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)
    FROM (SELECT DISTINCT coalesce(x, 'default') AS queue FROM unnest(queues) AS x) q;
END;
$fn$;

COMMENT ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                     text[], bigint[], integer[]) IS
    'Enqueue a batch given as parallel arrays; returns (ord, id) per input element, in input order. '
    'A dedupe_key already active in its queue returns the active job (raising its input watermark); '
    'a watermark already processed for the key returns the job that processed it.';
