-- Reverts revision 0014: no group keys, group limits nor fair walk; revision 0010's claim and enqueue_many,
-- revision 0012's enqueue_after and revision 0007's SQL API, as they were (their grants carried back).
CREATE TEMP TABLE pgq_0014_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], '
                'bigint[], integer[], text[])'::regprocedure,
                'pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text);
DROP FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], bigint[],
                               integer[], text[]);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[]);
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
DROP FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]);
DROP TABLE pgq.group_rate_starts;
DROP TABLE pgq.group_limits;
DROP INDEX pgq.jobs_running_group_idx;
DROP INDEX pgq.jobs_claim_group_idx;
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_group_key_limited;
ALTER TABLE pgq.jobs DROP COLUMN group_key;

CREATE FUNCTION pgq.enqueue_many(
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
REVOKE EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                            text[], bigint[], integer[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                     text[], bigint[], integer[]) IS
    'Enqueue a batch given as parallel arrays; returns (ord, id) per input element, in input order. '
    'A dedupe_key already active in its queue returns the active job (raising its input watermark); '
    'a watermark already processed for the key returns the job that processed it.';

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
    edge_parents   bigint[]
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
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure, ord)
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
                              pending_parents, finished_at, last_error, limited)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END,
               u.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r)
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
                                             integer[], boolean[], integer[], bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                      integer[], boolean[], integer[], bigint[]) IS
    'Enqueue a batch of jobs with dependencies (edge list: edge_jobs[k], 1-based, depends on edge_parents[k]); '
    'returns (ord, id) per job. A job waits until its parents finished; see pgq.job_dependencies.';

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
    on_parent_failure text DEFAULT 'cancel'
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
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with dedupe_key or watermark'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[cardinality(depends_on)]), depends_on) AS e);
END;
$fn$;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback).';
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text)
    FROM PUBLIC;

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
    finished_at timestamptz, progress jsonb
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its statements' estimated costs grow with the backlog: a server that compiles costly plans would
-- spend far longer compiling them than running them (see sql/transaction_guard.sql).
SET jit = off
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
    l_ids       bigint[] := '{}';   -- reserved candidates of limited kinds, within their limits
    at_ts       timestamptz;
    tried       bigint[] := '{}';   -- every row reserved so far
    taken       integer := 0;       -- rows claimed so far
    got         integer;
    pass_no     integer := 0;
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
    FOREACH q IN ARRAY wanted LOOP
        SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}')
        INTO found_ids, found_tids
        FROM (SELECT c.id, c.ctid
              FROM (SELECT j.id, j.ctid
                    FROM pgq.jobs j
                    WHERE j.status = 'queued' AND j.queue = q AND j.limited = false AND j.run_at <= now()
                      AND (kinds IS NULL OR j.kind = ANY(kinds))
                    ORDER BY j.priority, j.run_at, j.id
                    OFFSET 0) c  -- keeps the reservation below out of the scan's filter
              WHERE c.id <> ALL(tried) AND pg_try_advisory_xact_lock(1885827427, (c.id % 2147483648)::integer)
              LIMIT lim - taken) r;
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

    -- (b) Limited work, only when the wanted queues have any (one probe of jobs_claim_limited_idx).
    SELECT pass_no = 1 AND EXISTS (SELECT 1 FROM pgq.jobs j
                                 WHERE j.status = 'queued' AND j.limited AND j.queue = ANY(wanted))
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
        kinds_here := ARRAY(SELECT DISTINCT k FROM unnest(kinds_here) k ORDER BY k);

        -- Lock those kinds' limit rows, and only those: one claimer at a time counts and claims a
        -- limited kind. SKIP LOCKED: a kind another claimer holds is left for this round (a kind
        -- with both limits is claimed only when both rows were locked).
        WITH c AS (
            SELECT c.kind, c.max_running FROM pgq.concurrency_limits c
            WHERE c.kind = ANY(kinds_here) ORDER BY c.kind FOR UPDATE SKIP LOCKED
        ),
        r AS (
            SELECT r.kind, r.max_starts, r.per_s FROM pgq.rate_limits r
            WHERE r.kind = ANY(kinds_here) ORDER BY r.kind FOR UPDATE SKIP LOCKED
        ),
        held AS (
            SELECT coalesce(c.kind, r.kind) AS kind, c.max_running, r.max_starts, r.per_s
            FROM c FULL JOIN r ON r.kind = c.kind
            WHERE (c.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits x WHERE x.kind = r.kind))
              AND (r.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.rate_limits y WHERE y.kind = c.kind))
        )
        SELECT array_agg(h.kind ORDER BY h.kind), array_agg(h.max_running ORDER BY h.kind),
               array_agg(h.max_starts ORDER BY h.kind), array_agg(h.per_s ORDER BY h.kind),
               ARRAY(SELECT k FROM unnest(kinds_here) k
                     WHERE NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits x WHERE x.kind = k)
                       AND NOT EXISTS (SELECT 1 FROM pgq.rate_limits y WHERE y.kind = k))
        INTO l_kinds, l_max, l_starts, l_per, loose
        FROM held h;

        -- Free slots per locked kind, counted in this statement's snapshot, newer than the locks, so
        -- including every earlier claim of the kind; starts are counted and recorded at the clock
        -- time read once the locks are held, which grows in the order claims of a kind run. Then
        -- per kind and queue the best jobs of jobs_claim_limited_idx, reserved like (a).
        at_ts := clock_timestamp();
        SELECT coalesce(array_agg(p.id), '{}'), coalesce(array_agg(p.tid), '{}')
        INTO l_ids, l_tids
        FROM (
            SELECT p.id, p.tid
            FROM (SELECT k.kind,
                         greatest(least(
                             coalesce(k.max_running - (SELECT count(*) FROM pgq.jobs r
                                                       WHERE r.status = 'running' AND r.kind = k.kind), 2147483647),
                             coalesce(k.max_starts - (SELECT coalesce(sum(s.starts), 0) FROM pgq.rate_limit_starts s
                                                      WHERE s.kind = k.kind
                                                        AND s.at > at_ts - make_interval(secs => k.per_s)),
                                      2147483647)), 0) AS free
                  FROM unnest(l_kinds, l_max, l_starts, l_per) AS k(kind, max_running, max_starts, per_s)
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
    END IF;

    IF pass_no > 1 THEN
        l_ids := '{}';
        l_tids := '{}';
    END IF;
    EXIT WHEN cardinality(found_ids) + cardinality(l_ids) = 0;

    -- (c) Take: the best `lim` of the reserved rows still queued in this newer snapshot, locked in
    -- claim order (FOR NO KEY UPDATE: the lock an UPDATE takes anyway), skipping rows some other
    -- transaction holds (a producer, an operator).
    RETURN QUERY
    WITH picked AS (
        SELECT x.ctid AS tid
        FROM pgq.jobs x
        WHERE x.ctid = ANY(found_tids || l_tids) AND x.status = 'queued'
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
            started_at = coalesce(at_ts, statement_timestamp())
        -- Where the rows locked above are (they cannot move: this transaction holds them).
        WHERE j.ctid = ANY(ARRAY(SELECT p.tid FROM picked p))
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.status::text AS status, j.run_at, j.attempts,
                  j.max_attempts, j.dedupe_key, j.lease_token::text AS lease_token, j.lease_expires_at,
                  j.claimed_by, j.last_error, j.result, j.input_watermark, j.done_watermark, j.created_at,
                  j.started_at, j.finished_at, j.progress
    ),
    -- The window of each rate-limited kind: this claim's starts in, the starts that left it out.
    rate_started AS (
        INSERT INTO pgq.rate_limit_starts (kind, at, starts)
        SELECT c.kind, at_ts, count(*)
        FROM claimed c
        JOIN unnest(l_kinds, l_per) AS k(kind, per_s) ON k.kind = c.kind AND k.per_s IS NOT NULL
        GROUP BY c.kind
    ),
    rate_expired AS (
        DELETE FROM pgq.rate_limit_starts s
        USING unnest(l_kinds, l_per) AS k(kind, per_s)
        WHERE k.per_s IS NOT NULL AND s.kind = k.kind AND s.at <= at_ts - make_interval(secs => k.per_s)
    )
    SELECT c.id, c.queue, c.kind, c.payload, c.priority, c.status, c.run_at, c.attempts, c.max_attempts,
           c.dedupe_key, c.lease_token, c.lease_expires_at, c.claimed_by, c.last_error, c.result,
           c.input_watermark, c.done_watermark, c.created_at, c.started_at, c.finished_at, c.progress
    FROM claimed c
    ORDER BY c.priority, c.run_at, c.id;
    GET DIAGNOSTICS got = ROW_COUNT;
    taken := taken + got;
    -- Done when the claim is full, when nothing reserved was lost, or after three rounds.
    EXIT WHEN taken >= lim OR got >= cardinality(found_ids) + cardinality(l_ids) OR pass_no >= 3;
    END LOOP;
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;
COMMENT ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) IS
    'Claim up to lim (at most 256) ready jobs of the given queues (NULL: every queue) and kinds (NULL: any), '
    'honouring '
    'pauses and concurrency and rate limits exactly: each gets a new attempt under a fresh lease token '
    'expiring lease_s seconds from now, claimed_by worker. Returns them in claim order (priority, run_at, id). '
    'Needs pgq_worker.';

-- Mark or unmark the queued and waiting jobs of a kind after its limits changed (called by the
-- statements that set and remove limits). Rows another transaction holds are skipped: the claim
-- corrects any row it meets (see above).
CREATE OR REPLACE FUNCTION pgq.limits_changed(kind_name text) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH want AS (
        SELECT EXISTS (SELECT 1 FROM pgq.concurrency_limits c WHERE c.kind = kind_name)
            OR EXISTS (SELECT 1 FROM pgq.rate_limits r WHERE r.kind = kind_name) AS limited
    ),
    changed AS (
        UPDATE pgq.jobs j SET limited = w.limited
        FROM want w
        WHERE j.id = ANY(ARRAY(SELECT x.id FROM pgq.jobs x, want v
                               WHERE x.kind = kind_name AND x.status::text IN ('waiting', 'queued')
                                 AND x.limited <> v.limited
                               ORDER BY x.id
                               FOR NO KEY UPDATE OF x SKIP LOCKED))
        RETURNING j.id
    )
    SELECT count(*) FROM changed;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.limits_changed(text) FROM PUBLIC;
COMMENT ON FUNCTION pgq.limits_changed(text) IS
    'Mark the queued and waiting jobs of a kind limited or not, as its limits now say; returns how many '
    'changed. Run by the statements that set and remove limits. Needs pgq_worker.';

DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT o.proname, o.grantee FROM pg_temp.pgq_0014_grants o ORDER BY 1, 2 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       (SELECT p.oid::regprocedure FROM pg_proc p
                        WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = g.proname), g.grantee);
    END LOOP;
END;
$grants$;
