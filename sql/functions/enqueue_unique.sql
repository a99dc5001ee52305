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
    n_locked bigint;
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
    -- A producer of a scoped role set enqueues (replaces, debounces) in its queues only.
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        PERFORM pgq.check_queues(queues);
    END IF;
    -- Each key's producers one at a time: the row lock of the key's row of pgq.unique_locks (created
    -- if new), taken by the upsert's no-op update in (queue, key) order (no deadlock between batches)
    -- and held to the producer's commit (revision 0021). Per key: producers of other keys never wait
    -- (row locks live in the rows, not in PostgreSQL's finite shared lock table), and no role
    -- without pgq's rights can take one (it needs UPDATE on the table).
    WITH locked AS (
        INSERT INTO pgq.unique_locks AS u (queue, dedupe_key)
        SELECT DISTINCT coalesce(i.q, 'default'), i.k
        FROM unnest(queues, dedupe_keys) AS i(q, k)
        ORDER BY 1, 2
        ON CONFLICT (queue, dedupe_key) DO UPDATE SET used_at = statement_timestamp()
        RETURNING 1
    )
    SELECT count(*) INTO n_locked FROM locked;
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
                -- (Revision 0033: the jobs not finished are those of pgq.live_jobs.)
                UPDATE pgq.live_jobs j SET payload = r.payload, priority = r.priority, run_at = when_at
                WHERE j.id = (SELECT p.id FROM pgq.live_jobs p
                              WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key
                                AND p.status IN ('waiting', 'queued')
                              ORDER BY p.id DESC LIMIT 1)
                  AND j.status IN ('waiting', 'queued')
                RETURNING j.id INTO jid;
                EXIT WHEN jid IS NOT NULL;
                SELECT p.id INTO run_id FROM pgq.live_jobs p
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
                        UPDATE pgq.live_jobs j SET dedupe_key = r.dedupe_key WHERE j.id = jid;
                    EXCEPTION WHEN unique_violation THEN
                        jid := NULL;
                    END;
                    EXIT WHEN jid IS NOT NULL;
                    CONTINUE;
                END IF;
            ELSE
                -- unique_for: an active job of the key, else its newest finish within the window.
                -- Revision 0033: the active one in pgq.live_jobs, the finished ones in
                -- pgq.finished_jobs (only the days of the window are read), in one snapshot.
                SELECT coalesce(
                           (SELECT p.id FROM pgq.live_jobs p
                            WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key
                            ORDER BY p.id DESC LIMIT 1),
                           (SELECT p.id FROM pgq.finished_jobs p
                            WHERE p.queue = r.queue AND p.dedupe_key = r.dedupe_key
                              AND p.finished_at > statement_timestamp() - make_interval(secs => r.unique_for)
                            ORDER BY p.finished_at DESC, p.id DESC LIMIT 1))
                INTO jid;
                EXIT WHEN jid IS NOT NULL;
                SELECT f.job_id INTO jid FROM pgq.key_finishes f
                WHERE f.queue = r.queue AND f.dedupe_key = r.dedupe_key
                  AND f.finished_at > statement_timestamp() - make_interval(secs => r.unique_for);
                EXIT WHEN jid IS NOT NULL;
            END IF;
            -- No job of the key: a new one. A plain enqueue (pgq.enqueue_many) of the key may have
            -- added its active job meanwhile: then look again.
            INSERT INTO pgq.live_jobs AS j (kind, payload, queue, priority, run_at, dedupe_key, max_attempts, limited,
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

COMMENT ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[],
                                       integer[], text[], double precision[], boolean[], double precision[]) IS
    'Enqueue jobs with a dedupe key and a uniqueness variant (revision 0018): unique_for (seconds: the key '
    'also dedupes against its jobs finished that recently; at most 31 days), replace (a job of the key not started yet takes '
    'the new payload, priority and run_at; behind a running one a new job waits), debounce (seconds: replace, '
    'run_at pushed to now + debounce). Returns (ord, id) per input row.';
