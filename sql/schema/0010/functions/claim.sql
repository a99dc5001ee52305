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

COMMENT ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) IS
    'Claim up to lim (at most 256) ready jobs of the given queues (NULL: every queue) and kinds (NULL: any), '
    'honouring '
    'pauses and concurrency and rate limits exactly: each gets a new attempt under a fresh lease token '
    'expiring lease_s seconds from now, claimed_by worker. Returns them in claim order (priority, run_at, id). '
    'Needs pgq_worker.';
