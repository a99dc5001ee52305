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
    salt        text;               -- the reservations' key salt (pgq.claim_key)
    scope       text[];             -- the queues of the caller's scoped role set (NULL: any)
    -- Revision 0032: one lease token per claim, not per row (a uuid per row cost about 8,000
    -- instructions a job). The fence is (id, token), and every attempt of a job comes from another
    -- claim, so a token still names one attempt of each job; the jobs sharing it are the caller's.
    token       uuid := gen_random_uuid();
    prio        smallint;           -- the priority (a) scans (revision 0023)
    q_left      integer;            -- and what it may still reserve in the queue
    b_before    integer;            -- reservations before the second scan of (a)
    solo        boolean := false;   -- the claim runs alone in its one queue (revision 0024, see there)
    q_key       bigint;             -- a queue's claim key (revision 0024)
    c_n         integer;            -- rows per kind a claim naming its kinds reads (revision 0027)
    c_more      boolean := false;   -- and a kind had more: read the priority again
    c_ids       bigint[];           -- those rows in claim order
    c_tids      tid[];
    c_run       timestamptz[];
    c_att       integer[];
    c_busy      boolean[];
BEGIN
    -- Revision 0033: every statement reads and writes pgq.live_jobs, the partition of pgq.jobs that
    -- holds the waiting, queued and running jobs (a claim reads no other: the running ones its
    -- limits count are there too), so none pays the parent's partition planning and locks. The
    -- indexes named below are that table's (live_jobs_claim_idx, ...). Its ctids are its own: a
    -- ctid read from pgq.jobs could name a row of another partition.
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
    -- A worker of a scoped role set claims from its queues only (revision 0021): the queues asked
    -- for among them, all of them when none were. One probe of an empty table for everyone else.
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        SELECT c.queues INTO scope FROM pgq.caller_scope() c;
        IF scope IS NOT NULL THEN
            queues := ARRAY(SELECT g.name FROM unnest(coalesce(queues, scope)) AS g(name) WHERE g.name = ANY(scope));
        END IF;
    END IF;

    -- The kinds asked for, each once (revision 0027: (a) reads each kind's rows on its own).
    -- (One kind that is not NULL, the common case, is taken as it is: no statement.)
    IF kinds IS NOT NULL AND (cardinality(kinds) <> 1 OR kinds[1] IS NULL) THEN
        kinds := ARRAY(SELECT DISTINCT k.kind FROM unnest(kinds) AS k(kind) WHERE k.kind IS NOT NULL ORDER BY k.kind);
    END IF;

    -- The queues: the given ones, or every queue with queued jobs (a loose index scan of
    -- jobs_claim_idx, one probe per queue); paused ones left out. Exact: pgq.pause() waits for every
    -- transaction that read pgq.paused_queues (ACCESS EXCLUSIVE), this one included.
    -- Revision 0024: one queue named, the common case, takes a statement without the set operations
    -- below (their hash tables cost a claim of one job more to set up than to run); limited kinds
    -- are listed with UNION ALL (a kind with both limits is listed twice, which every use allows).
    IF cardinality(queues) = 1 AND queues[1] IS NOT NULL THEN
        SELECT CASE WHEN EXISTS (SELECT 1 FROM pgq.paused_queues p WHERE p.queue = queues[1])
                    THEN '{}'::text[] ELSE queues END,
               ARRAY(SELECT c.kind FROM pgq.concurrency_limits c UNION ALL SELECT r.kind FROM pgq.rate_limits r),
               (SELECT s.secret FROM pgq.claim_secret s) || ':' || floor(extract(epoch FROM now()) / 60)
        INTO wanted, limited_kinds, salt;
    ELSE
        WITH RECURSIVE every_queue AS (
            (SELECT j.queue FROM pgq.live_jobs j WHERE queues IS NULL AND j.status = 'queued' ORDER BY j.queue LIMIT 1)
            UNION ALL
            SELECT (SELECT j.queue FROM pgq.live_jobs j WHERE j.status = 'queued' AND j.queue > e.queue
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
            ARRAY(SELECT c.kind FROM pgq.concurrency_limits c UNION ALL SELECT r.kind FROM pgq.rate_limits r),
            (SELECT s.secret FROM pgq.claim_secret s) || ':' || floor(extract(epoch FROM now()) / 60)
        INTO wanted, limited_kinds, salt;
    END IF;
    IF cardinality(wanted) = 0 THEN
        RETURN;
    END IF;

    -- Revision 0024: a claim alone in its queue locks rows instead of reserving them. Each claim
    -- holds its queue's key (derived from pgq.claim_secret, so no other role can hold it): shared
    -- while it reserves, exclusive when it runs alone. A claim of one queue, with no concurrency or
    -- rate limit defined and no limited (grouped) job queued there, that gets the exclusive key
    -- (no other claim of the queue is under way) takes its rows in one ordered scan FOR NO KEY UPDATE
    -- SKIP LOCKED: no advisory reservation per row (an md5 and an entry of the shared lock table
    -- each), no busy-row pass, and row locks are no entries of the lock table, so such a claim may
    -- take up to 1,024 rows. Under contention, when the queue's key is held, claims reserve as
    -- before: the shared key keeps the lone path out while any of them reserves (a claim that
    -- cannot get the shared key reserves all the same; a row the lone claim then takes first is
    -- lost to its reservation and reserved again, as with any other claim). The keys wait for
    -- nothing: each is tried once.
    IF cardinality(wanted) = 1 AND cardinality(limited_kinds) = 0 AND (kinds IS NULL OR cardinality(kinds) = 1)
       AND NOT EXISTS (SELECT 1 FROM pgq.live_jobs j
                       WHERE j.status = 'queued' AND j.limited AND j.queue = wanted[1]
                       ORDER BY j.queue, j.kind LIMIT 1) THEN
        q_key := ('x' || left(md5((SELECT s.secret FROM pgq.claim_secret s) || '/queue/' || wanted[1]), 16))
                 ::bit(64)::bigint;
        solo := pg_try_advisory_xact_lock(q_key);
        IF NOT solo THEN
            PERFORM pg_try_advisory_xact_lock_shared(q_key);
        END IF;
    ELSE
        PERFORM pg_try_advisory_xact_lock_shared(
                    ('x' || left(md5((SELECT s.secret FROM pgq.claim_secret s) || '/queue/' || w.name), 16))
                    ::bit(64)::bigint)
        FROM unnest(wanted) AS w(name);
    END IF;

    -- Reservations are entries of PostgreSQL's shared lock table, which is finite: at most 256.
    -- Their keys are pgq.claim_key's (revision 0021): no role without pgq's rights can know one ahead.
    lim := least(lim, CASE WHEN solo THEN 1024 ELSE 256 END);

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
        -- Revision 0023: one priority at a time, best first, so that `run_at <= now()` bounds each
        -- scan of jobs_claim_idx (queue, limited, priority, run_at, id): the scheduled jobs of a
        -- priority come after its due ones and are never read. Before, priority was a range and
        -- run_at only a filter, and a claim that did not fill its batch walked every scheduled job
        -- of the queue. Per priority: one probe for the next priority with queued jobs, then the
        -- two scans below, each bounded by the due jobs of that priority.
        q_left := lim - taken;
        prio := NULL;
        IF solo THEN
            -- Alone in the queue (revision 0024), claiming any kind or one: per priority with due
            -- jobs of that kind, one statement locks them in claim order (through jobs_claim_idx for
            -- any kind, jobs_claim_kind_idx for one: revision 0027) and takes them where they are.
            -- No reservation, and none of the limited path: no limit is in play. A row a producer or
            -- an operator holds is skipped, and the next row counts in its place. (A claim of
            -- several kinds reserves: it merges their rows, which one locked scan cannot.)
            WHILE q_left > 0 LOOP
                IF kinds IS NULL THEN
                    SELECT j.priority INTO prio FROM pgq.live_jobs j
                    WHERE j.status = 'queued' AND j.queue = q AND j.limited = false
                      AND j.priority > coalesce(prio, -32769)
                    ORDER BY j.queue, j.limited, j.priority
                    LIMIT 1;
                ELSE
                    SELECT j.priority INTO prio FROM pgq.live_jobs j
                    WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = kinds[1]
                      AND j.priority > coalesce(prio, -32769)
                    ORDER BY j.queue, j.kind, j.priority
                    LIMIT 1;
                END IF;
                EXIT WHEN NOT FOUND;
                RETURN QUERY
                WITH picked AS (
                    SELECT a.tid
                    FROM (SELECT j.ctid AS tid FROM pgq.live_jobs j
                          WHERE kinds IS NULL AND j.status = 'queued' AND j.queue = q AND j.limited = false
                            AND j.priority = prio AND j.run_at <= now()
                          ORDER BY j.priority, j.run_at, j.id
                          LIMIT q_left
                          FOR NO KEY UPDATE SKIP LOCKED) a
                    UNION ALL
                    SELECT b.tid
                    FROM (SELECT j.ctid AS tid FROM pgq.live_jobs j
                          WHERE kinds IS NOT NULL AND j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE
                            AND j.kind = kinds[1] AND j.priority = prio AND j.run_at <= now()
                          ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
                          LIMIT q_left
                          FOR NO KEY UPDATE SKIP LOCKED) b
                ),
                claimed AS (
                    UPDATE pgq.live_jobs j
                    SET status = 'running',
                        attempts = j.attempts + 1,
                        lease_token = token,
                        lease_expires_at = now() + make_interval(secs => lease_s),
                        claimed_by = worker,
                        started_at = statement_timestamp(),
                        input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                               ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END
                    WHERE j.ctid = ANY(ARRAY(SELECT p.tid FROM picked p))
                    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.status::text AS status, j.run_at,
                              j.attempts, j.max_attempts, j.dedupe_key, j.lease_token::text AS lease_token,
                              j.lease_expires_at, j.claimed_by, j.last_error, j.result, j.input_watermark,
                              j.done_watermark, j.created_at, j.started_at, j.finished_at, j.progress, j.group_key,
                              j.sequence_key
                )
                SELECT c.id, c.queue, c.kind, c.payload, c.priority, c.status, c.run_at, c.attempts, c.max_attempts,
                       c.dedupe_key, c.lease_token, c.lease_expires_at, c.claimed_by, c.last_error, c.result,
                       c.input_watermark, c.done_watermark, c.created_at, c.started_at, c.finished_at, c.progress,
                       c.group_key, c.sequence_key
                FROM claimed c
                ORDER BY c.run_at, c.id;
                GET DIAGNOSTICS got = ROW_COUNT;
                q_left := q_left - got;
            END LOOP;
        ELSIF kinds IS NULL THEN
            WHILE q_left > 0 LOOP
                SELECT j.priority INTO prio FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue = q AND j.limited = false
                  AND j.priority > coalesce(prio, -32769)
                ORDER BY j.queue, j.limited, j.priority
                LIMIT 1;
                EXIT WHEN NOT FOUND;
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}'),
                       count(*), (array_agg(r.id ORDER BY r.run_at, r.id))[1],
                       (SELECT h.id FROM pgq.live_jobs h
                        WHERE h.status = 'queued' AND h.queue = q AND h.limited = false AND h.priority = prio
                          AND h.run_at <= now()
                        ORDER BY h.priority, h.run_at, h.id
                        LIMIT 1)
                INTO found_ids, found_tids, a_got, a_first, a_head
                FROM (SELECT c.id, c.ctid, c.run_at
                      FROM (SELECT j.id, j.ctid, j.run_at, j.attempts,
                                   j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                            FROM pgq.live_jobs j
                            WHERE j.status = 'queued' AND j.queue = q AND j.limited = false AND j.priority = prio
                              AND j.run_at <= now()
                            ORDER BY j.priority, j.run_at, j.id
                            OFFSET 0) c  -- keeps the reservation below out of the scan's filter
                      WHERE NOT c.busy AND c.id <> ALL(tried)
                        AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
                      LIMIT q_left) r;
                q_left := q_left - a_got;
                IF q_left > 0 THEN
                    b_examine := NULL;  -- short: every busy row of the priority
                    b_cap := NULL;
                ELSIF a_first IS DISTINCT FROM a_head THEN
                    b_examine := a_got;
                    b_cap := 2;
                ELSE
                    CONTINUE;
                END IF;
                b_before := cardinality(found_ids);
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}')
                INTO found_ids, found_tids
                FROM (SELECT c.id, c.ctid
                      FROM (SELECT x.id, x.ctid, x.attempts, x.run_at
                            FROM (SELECT j.id, j.ctid, j.run_at, j.attempts,
                                         j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                                  FROM pgq.live_jobs j
                                  WHERE j.status = 'queued' AND j.queue = q AND j.limited = false AND j.priority = prio
                                    AND j.run_at <= now()
                                  ORDER BY j.priority, j.run_at, j.id
                                  LIMIT b_examine) x
                            WHERE x.busy AND x.id <> ALL(tried) AND x.id <> ALL(found_ids)
                            ORDER BY x.run_at, x.id
                            LIMIT b_cap) c
                      WHERE pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))) r;
                q_left := q_left - (cardinality(found_ids) - b_before);
            END LOOP;
        ELSIF cardinality(kinds) = 1 THEN
            -- Revision 0027: a claim of one kind (the benchmark's worker, an app with one task) runs
            -- the scans above through jobs_claim_kind_idx (queue, kind, priority, run_at, id;
            -- unlimited rows), in the same order: no row of another kind is read.
            WHILE q_left > 0 LOOP
                SELECT j.priority INTO prio FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = kinds[1]
                  AND j.priority > coalesce(prio, -32769)
                ORDER BY j.queue, j.kind, j.priority
                LIMIT 1;
                EXIT WHEN NOT FOUND;
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}'),
                       count(*), (array_agg(r.id ORDER BY r.run_at, r.id))[1],
                       (SELECT h.id FROM pgq.live_jobs h
                        WHERE h.status = 'queued' AND h.queue = q AND h.limited IS NOT TRUE AND h.kind = kinds[1] AND h.priority = prio
                          AND h.run_at <= now()
                        ORDER BY h.queue, h.kind, h.priority, h.run_at, h.id
                        LIMIT 1)
                INTO found_ids, found_tids, a_got, a_first, a_head
                FROM (SELECT c.id, c.ctid, c.run_at
                      FROM (SELECT j.id, j.ctid, j.run_at, j.attempts,
                                   j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                            FROM pgq.live_jobs j
                            WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = kinds[1] AND j.priority = prio
                              AND j.run_at <= now()
                            ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
                            OFFSET 0) c  -- keeps the reservation below out of the scan's filter
                      WHERE NOT c.busy AND c.id <> ALL(tried)
                        AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
                      LIMIT q_left) r;
                q_left := q_left - a_got;
                IF q_left > 0 THEN
                    b_examine := NULL;  -- short: every busy row of the priority
                    b_cap := NULL;
                ELSIF a_first IS DISTINCT FROM a_head THEN
                    b_examine := a_got;
                    b_cap := 2;
                ELSE
                    CONTINUE;
                END IF;
                b_before := cardinality(found_ids);
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.ctid), '{}')
                INTO found_ids, found_tids
                FROM (SELECT c.id, c.ctid
                      FROM (SELECT x.id, x.ctid, x.attempts, x.run_at
                            FROM (SELECT j.id, j.ctid, j.run_at, j.attempts,
                                         j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy
                                  FROM pgq.live_jobs j
                                  WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = kinds[1] AND j.priority = prio
                                    AND j.run_at <= now()
                                  ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
                                  LIMIT b_examine) x
                            WHERE x.busy AND x.id <> ALL(tried) AND x.id <> ALL(found_ids)
                            ORDER BY x.run_at, x.id
                            LIMIT b_cap) c
                      WHERE pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))) r;
                q_left := q_left - (cardinality(found_ids) - b_before);
            END LOOP;
        ELSE
            -- Revision 0027: a claim that names several kinds reads only their rows,
            -- through jobs_claim_kind_idx (queue, kind, priority, run_at, id; unlimited rows, whose condition
            -- `limited IS NOT TRUE` only that index fits, see revision 0027): jobs of
            -- other kinds, however many and wherever they sort, are never read. Per priority with
            -- queued jobs of those kinds (one probe per kind), each kind's first c_n due rows, merged in
            -- claim order (c_*); then the two scans below, over those candidates. When the claim comes
            -- back short and a kind had more rows than it read, the same priority again with four
            -- times as many (busy rows: other claimers at the head). Cost: kinds x (probe + batch).
            c_n := 2 * q_left + 8;
            WHILE q_left > 0 LOOP
                IF NOT c_more THEN
                    SELECT min(x.priority) INTO prio
                    FROM unnest(kinds) AS k(kind)
                    CROSS JOIN LATERAL (
                        SELECT j.priority FROM pgq.live_jobs j
                        WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = k.kind
                          AND j.priority > coalesce(prio, -32769)
                        ORDER BY j.queue, j.kind, j.priority
                        LIMIT 1) x;
                    EXIT WHEN prio IS NULL;
                END IF;
                SELECT coalesce(array_agg(m.id ORDER BY m.run_at, m.id), '{}'),
                       coalesce(array_agg(m.ctid ORDER BY m.run_at, m.id), '{}'),
                       coalesce(array_agg(m.run_at ORDER BY m.run_at, m.id), '{}'),
                       coalesce(array_agg(m.attempts ORDER BY m.run_at, m.id), '{}'),
                       coalesce(array_agg(m.busy ORDER BY m.run_at, m.id), '{}'),
                       coalesce(max(m.n) >= c_n, false)
                INTO c_ids, c_tids, c_run, c_att, c_busy, c_more
                FROM unnest(kinds) AS k(kind)
                CROSS JOIN LATERAL (
                    SELECT j.id, j.ctid, j.run_at, j.attempts,
                           j.xmax <> '0'::xid AND age(j.xmax) <= busy_age AS busy,
                           row_number() OVER () AS n
                    FROM (SELECT j.id, j.ctid, j.run_at, j.attempts, j.xmax
                          FROM pgq.live_jobs j
                          WHERE j.status = 'queued' AND j.queue = q AND j.limited IS NOT TRUE AND j.kind = k.kind
                            AND j.priority = prio AND j.run_at <= now()
                          ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
                          LIMIT c_n) j) m;
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.tid), '{}'),
                       count(*), (array_agg(r.id ORDER BY r.ord))[1]
                INTO found_ids, found_tids, a_got, a_first
                FROM (SELECT c.id, c.tid, c.ord
                      FROM unnest(c_ids, c_tids, c_run, c_att, c_busy) WITH ORDINALITY AS c(id, tid, run_at, attempts, busy, ord)
                      WHERE NOT c.busy AND c.id <> ALL(tried) AND c.id <> ALL(found_ids)
                        AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
                      LIMIT q_left) r;
                q_left := q_left - a_got;
                IF q_left > 0 THEN
                    b_examine := NULL;  -- short: every busy candidate
                    b_cap := NULL;
                ELSIF a_first IS DISTINCT FROM c_ids[1] THEN
                    b_examine := a_got;
                    b_cap := 2;
                ELSE
                    c_more := false;
                    CONTINUE;
                END IF;
                b_before := cardinality(found_ids);
                SELECT found_ids || coalesce(array_agg(r.id), '{}'), found_tids || coalesce(array_agg(r.tid), '{}')
                INTO found_ids, found_tids
                FROM (SELECT c.id, c.tid
                      FROM (SELECT c.id, c.tid, c.run_at, c.attempts
                            FROM unnest(c_ids, c_tids, c_run, c_att, c_busy) WITH ORDINALITY AS c(id, tid, run_at, attempts, busy, ord)
                            WHERE c.ord <= coalesce(b_examine, c_n * cardinality(kinds))
                              AND c.busy AND c.id <> ALL(tried) AND c.id <> ALL(found_ids)
                            ORDER BY c.ord
                            LIMIT b_cap) c
                      WHERE pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))) r;
                q_left := q_left - (cardinality(found_ids) - b_before);
                IF q_left > 0 AND c_more THEN
                    c_n := c_n * 4;
                ELSE
                    c_more := false;
                END IF;
            END LOOP;
            c_more := false;
        END IF;
    END LOOP;
    IF solo THEN
        RETURN;  -- the lone claim took its rows above, priority by priority
    END IF;
    tried := tried || found_ids;

    -- Unmarked rows of limited kinds are marked (and leave jobs_claim_idx's unlimited part), never
    -- claimed as unlimited work. Rows another transaction holds are left for a later claim.
    IF cardinality(limited_kinds) > 0 AND cardinality(found_ids) > 0 THEN
        WITH marked AS (
            UPDATE pgq.live_jobs j SET limited = true
            WHERE j.id = ANY(ARRAY(SELECT x.id FROM pgq.live_jobs x
                                   WHERE x.id = ANY(found_ids) AND x.kind = ANY(limited_kinds) AND x.status = 'queued'
                                   ORDER BY x.id
                                   FOR NO KEY UPDATE SKIP LOCKED))
            RETURNING j.id
        )
        SELECT ARRAY(SELECT x.id FROM pgq.live_jobs x WHERE x.id = ANY(found_ids) AND x.kind = ANY(limited_kinds))
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
                                       SELECT j.kind FROM pgq.live_jobs j
                                       WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                                       ORDER BY j.queue, j.kind LIMIT 1) x)
    INTO any_limited;
    IF any_limited THEN
        -- Its kinds, per queue by a loose index scan (one probe per kind).
        FOREACH q IN ARRAY wanted LOOP
            kinds_here := kinds_here || ARRAY(
                WITH RECURSIVE k AS (
                    (SELECT j.kind FROM pgq.live_jobs j
                     WHERE j.status = 'queued' AND j.limited AND j.queue = q ORDER BY j.kind LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.kind FROM pgq.live_jobs j
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
            WHERE coalesce((SELECT c.max_running > (SELECT count(*) FROM pgq.live_jobs r
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
                          SELECT j.group_key FROM pgq.live_jobs j
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
                             SELECT j.group_key FROM pgq.live_jobs j
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
                         coalesce(k.max_running - (SELECT count(*) FROM pgq.live_jobs r
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
                          -- Revision 0023: per priority of the kind's queued jobs (a loose index
                          -- scan, read only as far as the LIMIT needs), its due jobs: `run_at <= now()`
                          -- bounds each scan, and no scheduled job is read.
                          SELECT c.id, c.tid, c.priority, c.run_at
                          FROM (WITH RECURSIVE pr AS (
                                    (SELECT j.priority FROM pgq.live_jobs j
                                     WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = f.kind
                                     ORDER BY j.queue, j.kind, j.priority LIMIT 1)
                                    UNION ALL
                                    SELECT (SELECT j.priority FROM pgq.live_jobs j
                                            WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                                              AND j.kind = f.kind AND j.priority > pr.priority
                                            ORDER BY j.queue, j.kind, j.priority LIMIT 1)
                                    FROM pr
                                    WHERE pr.priority IS NOT NULL
                                )
                                SELECT d.id, d.tid, d.priority, d.run_at, d.attempts
                                FROM pr
                                CROSS JOIN LATERAL (
                                    SELECT j.id, j.ctid AS tid, j.priority, j.run_at, j.attempts
                                    FROM pgq.live_jobs j
                                    WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = f.kind
                                      AND j.priority = pr.priority AND j.run_at <= now()
                                    ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
                                    OFFSET 0) d  -- one scan per priority, never a join over the range
                                WHERE pr.priority IS NOT NULL
                                OFFSET 0) c
                          WHERE pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
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
                -- The next priority with ready jobs of the kind (jobs_claim_limited_idx): per queue, a
                -- loose index scan over the priorities after `level`, each with one probe for a due
                -- job (revision 0023: scheduled jobs bound the probe, never make it walk).
                SELECT min(x.priority) INTO level
                FROM unnest(wanted) AS w(name)
                CROSS JOIN LATERAL (
                    WITH RECURSIVE pr AS (
                        (SELECT j.priority FROM pgq.live_jobs j
                         WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = w_kinds[wi]
                           AND j.priority > coalesce(level, -32769)
                         ORDER BY j.queue, j.kind, j.priority LIMIT 1)
                        UNION ALL
                        SELECT (SELECT j.priority FROM pgq.live_jobs j
                                WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                                  AND j.kind = w_kinds[wi] AND j.priority > pr.priority
                                ORDER BY j.queue, j.kind, j.priority LIMIT 1)
                        FROM pr
                        WHERE pr.priority IS NOT NULL
                    )
                    -- A LATERAL with its LIMIT, not an EXISTS: the planner made that a semi join over
                    -- the kind's whole range.
                    SELECT pr.priority FROM pr
                    CROSS JOIN LATERAL (
                        SELECT j.priority FROM pgq.live_jobs j
                        WHERE j.status = 'queued' AND j.limited AND j.queue = w.name
                          AND j.kind = w_kinds[wi] AND j.priority = pr.priority AND j.run_at <= now()
                        ORDER BY j.queue, j.kind, j.priority, j.run_at LIMIT 1) d
                    WHERE pr.priority IS NOT NULL
                    LIMIT 1) x;
                EXIT WHEN level IS NULL;
                spare_keys := '{}';
                spare_n := '{}';
                -- Segments: 1, the keys after turn_after (all keys without one), per queue; 2, the jobs
                -- without a group key; 3, the keys up to turn_after, per queue.
                FOR w_phase IN 1..3 LOOP
                    EXIT WHEN w_got >= budget;
                    IF w_phase = 2 THEN
                        g_ids := pgq.claim_group_heads(wanted, w_kinds[wi], NULL, level::smallint, 1, l_ids, salt);
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
                                (SELECT j.group_key, 1 AS ord FROM pgq.live_jobs j
                                 WHERE j.status = 'queued' AND j.limited AND j.queue = q AND j.kind = w_kinds[wi]
                                   AND j.group_key > CASE WHEN w_phase = 1 THEN coalesce(w_turn[wi], '') ELSE '' END
                                 ORDER BY j.queue, j.kind, j.group_key LIMIT 1)
                                UNION ALL
                                SELECT (SELECT j.group_key FROM pgq.live_jobs j
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
                                         ELSE w_gmax[wi] - (SELECT count(*) FROM pgq.live_jobs r
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
                                FROM (SELECT j.id, j.attempts, j.run_at FROM pgq.live_jobs j
                                      WHERE room.free > 0  -- checked first: no head of a full group is reserved
                                        AND j.status = 'queued' AND j.limited AND j.queue = q
                                        AND j.kind = w_kinds[wi] AND j.group_key = g.group_key
                                        AND j.priority = level AND j.run_at <= now()
                                      ORDER BY j.group_key, j.priority, j.run_at, j.id
                                      OFFSET 0) c
                                WHERE c.id <> ALL(l_ids)
                                  AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
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
                                                   least(spare_n[si], budget - w_got), l_ids, salt);
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
            l_tids := ARRAY(SELECT j.ctid FROM pgq.live_jobs j WHERE j.id = ANY(l_ids));
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
                  FROM pgq.live_jobs x
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
        FROM pgq.live_jobs x
        WHERE x.ctid = ANY(fair_tids) AND x.status = 'queued'
        ORDER BY x.priority, x.run_at, x.id
        LIMIT lim - taken
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE pgq.live_jobs j
        SET status = 'running',
            attempts = j.attempts + 1,
            lease_token = token,
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
        FROM pgq.live_jobs j
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

COMMENT ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) IS
    'Claim up to lim (at most 256; 1,024 when the claim runs alone in its one queue) ready jobs of the given queues (NULL: every queue) and kinds (NULL: any), '
    'honouring pauses, concurrency and rate limits and per-group limits (pgq.group_limits) exactly, and '
    'taking group keys in turn within a priority: each gets a new attempt under a fresh lease token '
    'expiring lease_s seconds from now, claimed_by worker. Returns them in claim order (priority, run_at, id), '
    'with their group and sequence keys. Needs pgq_worker.';
