-- pgq schema, revision 0018: uniqueness variants of a dedupe key (issue 32, part 5).
--
--   unique_for  the key dedupes while a job of it is active (waiting, queued, running) or finished
--               less than unique_for ago: the enqueue answers with that job and adds nothing.
--   replace     (on_conflict 'replace') a job of the key not started yet (queued, scheduled, or
--               waiting behind a running one) gets the enqueue's payload, priority and run_at; a
--               running job is never touched: a new job is added behind it, waiting on it.
--   debounce    replace, with run_at pushed to statement_timestamp() + debounce.
-- The plain dedupe (on_conflict 'ignore', no window) stays pgq.enqueue_many's, unchanged.
--
-- Design:
--   * All variants go through pgq.enqueue_unique, which takes a transaction-level advisory lock per
--     (queue, key) (keys in one global order) before it looks at the key: producers of one key are
--     serialized until they commit, so the last to commit is the last to write (its payload wins),
--     and two producers never both add a job. Workers never take this lock; the only row lock an
--     enqueue takes is the UPDATE of the queued (or waiting) job it replaces, held to the
--     producer's commit: claims skip that row meanwhile (docs/operations.md, threat model).
--   * "Finished less than unique_for ago" reads pgq.jobs through a new partial index on
--     (queue, dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL: no finishing function writes
--     anything more, and unkeyed rows never enter it. A purged job leaves its key's newest finish
--     in pgq.key_finishes: an AFTER DELETE row trigger whose WHEN lets only keyed, finished rows
--     through (the purge of unkeyed rows does no more than before). unique_for is at most 31 days,
--     so a row of pgq.key_finishes older than that can no longer matter: each firing of the trigger
--     also deletes up to 10 of those (index on finished_at), so the purge that adds rows prunes them
--     faster than it adds them, and the table holds the keys purged in the last 31 days.
--   * The job behind a running one is enqueued by pgq.enqueue_after with a run-on-failure edge on
--     the running job (it runs once that job finished, whatever its outcome), then given the key.
--     Waiting, it is outside jobs_dedupe_active_uq; its release to queued happens in the running
--     job's finishing transaction, when that job leaves the index. If the running job finishes (or
--     goes back to queued for a retry) between the look and pgq.enqueue_after, the new job may come
--     out queued next to another active job of the key: the unique violation rolls back that
--     attempt (a subtransaction) and the loop looks at the key again (it replaces that job).
--   * The running job failing or being cancelled does not cancel the job behind it: that job holds
--     the newer input, which still has to be processed.

CREATE INDEX jobs_dedupe_finished_idx ON pgq.jobs (queue, dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL;

CREATE TABLE pgq.key_finishes (
    queue       text NOT NULL,
    dedupe_key  text NOT NULL,
    job_id      bigint NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (queue, dedupe_key)
);
COMMENT ON TABLE pgq.key_finishes IS
    'The newest finish of each dedupe key whose job was deleted (purged): what unique_for reads once '
    'the job is gone (revision 0018). Written only by the trigger jobs_key_finish_trg.';
COMMENT ON COLUMN pgq.key_finishes.queue IS 'Queue of the key.';
COMMENT ON COLUMN pgq.key_finishes.dedupe_key IS 'The dedupe key.';
COMMENT ON COLUMN pgq.key_finishes.job_id IS 'The deleted job (the id unique_for answers with).';
COMMENT ON COLUMN pgq.key_finishes.finished_at IS 'When it finished.';
CREATE INDEX key_finishes_finished_idx ON pgq.key_finishes (finished_at);

CREATE FUNCTION pgq.key_finish_keep() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    INSERT INTO pgq.key_finishes AS f (queue, dedupe_key, job_id, finished_at)
    VALUES (OLD.queue, OLD.dedupe_key, OLD.id, OLD.finished_at)
    ON CONFLICT (queue, dedupe_key) DO UPDATE
    SET job_id = EXCLUDED.job_id, finished_at = EXCLUDED.finished_at
    WHERE f.finished_at < EXCLUDED.finished_at;
    -- Rows past the longest unique_for (31 days) no longer matter: a few per firing, so that
    -- the purge bounds the table.
    DELETE FROM pgq.key_finishes f
    WHERE (f.queue, f.dedupe_key) IN (SELECT o.queue, o.dedupe_key FROM pgq.key_finishes o
                                      WHERE o.finished_at < statement_timestamp() - interval '31 days'
                                      ORDER BY o.finished_at LIMIT 10
                                      FOR UPDATE SKIP LOCKED);
    RETURN NULL;
END;
$fn$;
COMMENT ON FUNCTION pgq.key_finish_keep() IS
    'Trigger of pgq.jobs (AFTER DELETE, keyed finished rows only): keeps the key''s newest finish in '
    'pgq.key_finishes, for unique_for, and deletes up to 10 rows older than 31 days (the longest unique_for; '
    'revision 0018).';
REVOKE EXECUTE ON FUNCTION pgq.key_finish_keep() FROM PUBLIC;
CREATE TRIGGER jobs_key_finish_trg AFTER DELETE ON pgq.jobs
FOR EACH ROW WHEN (OLD.dedupe_key IS NOT NULL AND OLD.finished_at IS NOT NULL)
EXECUTE FUNCTION pgq.key_finish_keep();

-- One call per batch of variant jobs: arrays of one element per job. unique_fors, debounces in
-- seconds (NULL: none); replaces: on_conflict 'replace'. Returns (ord, id) per input row.
CREATE FUNCTION pgq.enqueue_unique(
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
COMMENT ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[],
                                       integer[], text[], double precision[], boolean[], double precision[]) IS
    'Enqueue jobs with a dedupe key and a uniqueness variant (revision 0018): unique_for (seconds: the key '
    'also dedupes against its jobs finished that recently; at most 31 days), replace (a job of the key not started yet takes '
    'the new payload, priority and run_at; behind a running one a new job waits), debounce (seconds: replace, '
    'run_at pushed to now + debounce). Returns (ord, id) per input row.';
REVOKE EXECUTE ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                              text[], integer[], text[], double precision[], boolean[],
                                              double precision[]) FROM PUBLIC;

-- A replacement released late must not take a key another job holds meanwhile: revision 0017's
-- pgq.release_children, with that child chained behind the key's job (the step before `ready`).
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
        -- A child about to be queued whose dedupe key another active job holds (a replacement queued
        -- behind a running job, revision 0018, released late by the settle after a plain enqueue took
        -- the freed key) would break jobs_dedupe_active_uq: it waits for that job too (one more edge,
        -- needing no success), as it waited for the job it replaces.
        WITH held AS (
            SELECT c.id, (SELECT a.id FROM pgq.jobs a
                          WHERE a.queue = c.queue AND a.dedupe_key = c.dedupe_key
                            AND a.status IN ('queued', 'running') AND a.id <> c.id
                          ORDER BY a.id LIMIT 1) AS holder
            FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
            JOIN pgq.jobs c ON c.id = k.id
            WHERE k.doomed_by IS NULL AND c.status = 'waiting' AND c.dedupe_key IS NOT NULL
              AND c.pending_parents <= k.n
        ),
        chained AS (
            INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success)
            SELECT h.id, h.holder, false FROM held h WHERE h.holder IS NOT NULL
            ORDER BY h.id
            ON CONFLICT DO NOTHING
            RETURNING job_id
        )
        UPDATE pgq.jobs c SET pending_parents = c.pending_parents + 1
        FROM chained x WHERE c.id = x.job_id;
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

-- The SQL API takes the variants (a new signature is a new function: the old one is dropped, its
-- grants carried to the new one at the end).
CREATE TEMP TABLE pgq_0018_grants ON COMMIT DROP AS
SELECT a.grantee::regrole::text AS grantee
FROM aclexplode((SELECT p.proacl FROM pg_proc p
                 WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, '
                               'bigint[], text, text, text, text)'::regprocedure)) a
WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
  AND a.grantee <> (SELECT p.proowner FROM pg_proc p
                    WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, '
                                  'bigint[], text, text, text, text)'::regprocedure);
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text,
                          text);

-- Revision 0017's body, with unique_for, on_conflict and debounce sent to pgq.enqueue_unique.
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
    sequence_on_failure text DEFAULT 'hold',
    unique_for          interval DEFAULT NULL,
    on_conflict         text DEFAULT 'ignore',
    debounce            interval DEFAULT NULL
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
    IF group_key = '' THEN
        RAISE EXCEPTION 'group_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_conflict IS NULL OR on_conflict NOT IN ('ignore', 'replace') THEN
        RAISE EXCEPTION 'on_conflict must be ''ignore'' or ''replace'', got %', coalesce(on_conflict, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unique_for IS NOT NULL OR on_conflict = 'replace' OR debounce IS NOT NULL THEN
        IF dedupe_key IS NULL THEN
            RAISE EXCEPTION 'unique_for, on_conflict ''replace'' and debounce need a dedupe_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for <= interval '0' OR debounce <= interval '0' THEN
            RAISE EXCEPTION 'unique_for and debounce must be positive' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for > interval '31 days' THEN
            RAISE EXCEPTION 'unique_for must be at most 31 days' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for IS NOT NULL AND (on_conflict = 'replace' OR debounce IS NOT NULL) THEN
            RAISE EXCEPTION 'unique_for cannot be combined with on_conflict ''replace'' or debounce'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF debounce IS NOT NULL AND run_at IS NOT NULL THEN
            RAISE EXCEPTION 'debounce cannot be combined with run_at' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF watermark IS NOT NULL OR depends_on IS NOT NULL OR sequence_key IS NOT NULL THEN
            RAISE EXCEPTION 'unique_for, on_conflict ''replace'' and debounce cannot be combined with watermark, '
                            'depends_on or sequence_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN (SELECT e.id FROM pgq.enqueue_unique(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[max_attempts], ARRAY[group_key],
            ARRAY[extract(epoch FROM unique_for)::double precision], ARRAY[on_conflict = 'replace'],
            ARRAY[extract(epoch FROM debounce)::double precision]) AS e);
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
                                text, text, interval, text, interval) IS
    'Enqueue one job and return its id (or the id of the job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback); '
    'group_key: the job''s group (per-group limits, fair claiming); sequence_key: its sequence (runs after '
    'the key''s previous job, one at a time); sequence_on_failure: ''hold'' (default: failing for good holds '
    'the sequence) or ''continue''; with dedupe_key: unique_for (dedupe against recent finishes too), '
    'on_conflict ''ignore'' (default) or ''replace'', debounce (replace, run_at = now + debounce).';
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text, text, text, interval, text, interval) FROM PUBLIC;

-- The grants: the SQL API's carried to its successor, and pgq.enqueue_unique to whoever may call
-- pgq.enqueue_many (the producers). No role gets a write on pgq.key_finishes.
DO $grants$
DECLARE
    g text;
BEGIN
    FOR g IN SELECT DISTINCT o.grantee FROM pg_temp.pgq_0018_grants o ORDER BY 1 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, '
                       'integer, bigint[], text, text, text, text, interval, text, interval) TO %s', g);
    END LOOP;
    FOR g IN SELECT DISTINCT a.grantee::regrole::text
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.oid = 'pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                           'text[], bigint[], integer[], text[])'::regprocedure
               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
             ORDER BY 1 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], '
                       'timestamptz[], double precision[], text[], integer[], text[], double precision[], '
                       'boolean[], double precision[]) TO %s', g);
    END LOOP;
END;
$grants$;
