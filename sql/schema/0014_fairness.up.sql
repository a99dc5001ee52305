-- pgq schema, revision 0014: group keys, per-group concurrency and rate limits, fair claiming.
--
-- (1) A job may carry a group key (pgq.jobs.group_key: a tenant, a customer, an account). Every
-- enqueue path sets it: the plain INSERTs of sql/job_insert*.sql, pgq.enqueue_many and
-- pgq.enqueue_after (a new last argument, group_keys), and the SQL API pgq.enqueue (group_key).
--
-- (2) Grouped jobs leave the claim's fast path. A job with a group key is always `limited`
-- (CHECK jobs_group_key_limited), so the claim of plain work (jobs_claim_idx, limited = false) never
-- reads a grouped row and keeps its cost; grouped rows are claimed per kind, as limited kinds are
-- (revision 0010), through jobs_claim_group_idx (queue, kind, group_key, ...). The CHECK makes the
-- mark exact for groups: no claim needs to correct an unmarked grouped row, and pgq.limits_changed
-- never unmarks one.
--
-- (3) pgq.group_limits: per kind, at most max_running running jobs per group key and at most
-- max_starts starts per group key in any per_s-second window. Exact the way kind limits are: the
-- claim locks the kind's group_limits row (FOR UPDATE SKIP LOCKED, like its other limit rows), so
-- one claimer at a time claims grouped jobs of the kind, and counts each group's running jobs
-- (jobs_running_group_idx) and window starts (pgq.group_rate_starts) in statements that start after
-- the lock, so they see every earlier claim of the kind. Completions, failures and rescues only
-- lower those counts and take no lock of the claim.
--
-- (4) Fair claiming. Within a kind and a priority (best first), the claim walks the groups that
-- have queued work (a loose index scan of jobs_claim_group_idx, one probe per group, in one
-- statement per segment of the key range) and reserves one job per group until every group had its
-- turn, then more of the groups with room, until the batch is full: a group with a backlog of
-- 100,000 jobs takes one slot of a claim and a group with one job another. The take (c) orders what
-- it keeps the same way across kinds: within a priority, every group's first reserved row, then
-- every group's second, and so on (plain jobs are one group). The walk of a kind with a
-- group_limits row starts after the group the kind's previous claim ended on
-- (group_limits.turn_after, written under the row lock), so groups take turns across claims too;
-- jobs without a group key of a limited kind take part as one group. The walk costs one probe per
-- group visited: a claim visits the groups it reserves from, plus the groups it finds at their limit.
--
-- (5) pgq.claim runs with plan_cache_mode = force_generic_plan (see its SET clause).

ALTER TABLE pgq.jobs ADD COLUMN group_key text;
COMMENT ON COLUMN pgq.jobs.group_key IS
    'The job''s group (a tenant, a customer): per-group limits (pgq.group_limits) and fair claiming '
    'apply per group key. NULL: no group.';
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_group_key_limited CHECK (group_key IS NULL OR (limited AND group_key <> ''));

-- Queued grouped (and other limited) rows per queue, kind and group, each group in claim order: the
-- walk over a kind's groups (a loose index scan) and each group's head. NULL group keys sort last.
CREATE INDEX jobs_claim_group_idx ON pgq.jobs (queue, kind, group_key, priority, run_at, id)
    WHERE status = 'queued' AND limited;
COMMENT ON INDEX pgq.jobs_claim_group_idx IS
    'Queued limited jobs per queue, kind and group key in claim order: the claim''s walk over groups.';
CREATE INDEX jobs_running_group_idx ON pgq.jobs (kind, group_key) WHERE status = 'running' AND group_key IS NOT NULL;
COMMENT ON INDEX pgq.jobs_running_group_idx IS
    'Running grouped jobs per kind and group key: what the claim counts against max_running.';

CREATE TABLE pgq.group_limits (
    kind        text PRIMARY KEY,
    max_running integer CHECK (max_running > 0),
    max_starts  integer CHECK (max_starts > 0),
    per_s       double precision CHECK (per_s > 0 AND per_s <= 86400),
    turn_after  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT group_limits_rate_whole CHECK ((max_starts IS NULL) = (per_s IS NULL))
);
COMMENT ON TABLE pgq.group_limits IS
    'Per-group limits of a kind: at most max_running running jobs and at most max_starts starts in any '
    'per_s-second window per group key, across all workers (NULL: no such limit). Set by tasks declared '
    'with group_concurrency= / group_rate_limit=, by Queue.set_group_limits, pgq group-limits, or here.';
COMMENT ON COLUMN pgq.group_limits.kind IS 'Task kind the limits apply to.';
COMMENT ON COLUMN pgq.group_limits.max_running IS 'Most running jobs of the kind per group key (NULL: any).';
COMMENT ON COLUMN pgq.group_limits.max_starts IS 'Most starts of the kind per group key in one window (NULL: any).';
COMMENT ON COLUMN pgq.group_limits.per_s IS 'Length of the sliding window of max_starts, in seconds.';
COMMENT ON COLUMN pgq.group_limits.turn_after IS
    'The group key the kind''s last claim ended its walk on: the next claim starts after it (round robin).';
COMMENT ON COLUMN pgq.group_limits.updated_at IS 'When the limits were last set.';

-- The starts of groups of kinds with a group rate limit still inside their window: one row per
-- claim and group (its time, how many jobs of the group it started), written by the claim, which
-- also deletes the rows that left the window.
CREATE TABLE pgq.group_rate_starts (
    kind      text NOT NULL,
    group_key text NOT NULL,
    at        timestamptz NOT NULL,
    starts    integer NOT NULL CHECK (starts > 0)
);
CREATE INDEX group_rate_starts_group_idx ON pgq.group_rate_starts (kind, group_key, at);
CREATE INDEX group_rate_starts_at_idx ON pgq.group_rate_starts (kind, at);
COMMENT ON TABLE pgq.group_rate_starts IS
    'Starts of groups of rate-limited kinds inside their window (one row per claim and group).';
COMMENT ON COLUMN pgq.group_rate_starts.kind IS 'Task kind.';
COMMENT ON COLUMN pgq.group_rate_starts.group_key IS 'Group key.';
COMMENT ON COLUMN pgq.group_rate_starts.at IS 'When the claim started them (database clock).';
COMMENT ON COLUMN pgq.group_rate_starts.starts IS 'How many jobs of the group that claim started.';

-- Roles that may insert a job's input columns (sql/job_insert_one.sql) may insert its group key.
DO $grant$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee
        FROM information_schema.column_privileges a
        WHERE a.table_schema = 'pgq' AND a.table_name = 'jobs' AND a.column_name = 'limited'
          AND a.privilege_type = 'INSERT' AND a.grantee <> current_user
          AND a.grantee IN (SELECT rolname FROM pg_catalog.pg_roles)
    LOOP
        EXECUTE format('GRANT INSERT (group_key) ON pgq.jobs TO %I', r.grantee);
    END LOOP;
END
$grant$;

-- pgq.enqueue_many and pgq.enqueue_after take the group keys as a new last argument (a new
-- signature is a new function: the old ones are dropped below, after their grants were copied).
CREATE TEMP TABLE pgq_0014_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], '
                'bigint[], integer[])'::regprocedure,
                'pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text);
DROP FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], bigint[],
                               integer[]);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[]);
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);

-- pgq:function enqueue_many
REVOKE EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                            text[], bigint[], integer[], text[]) FROM PUBLIC;


-- pgq:function enqueue_after
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[], text[]) FROM PUBLIC;


-- pgq:function claim
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;

-- The reservation of a kind's group heads for pgq.claim's walk: up to n queued, ready jobs of group
-- `key` (NULL: the jobs without a group key) and priority `prio` in claim order, per wanted queue
-- (jobs_claim_group_idx: one index range each), leaving out `skip` (rows
-- this claim reserved already: its own advisory locks would not stop it), each reserved with the
-- claim's transaction-level advisory lock (pg_try_advisory_xact_lock, as pgq.claim does). Returns
-- the best n of them. Run only by pgq.claim, with its owner's rights.
-- pgq:function claim_group_heads
REVOKE EXECUTE ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]) FROM PUBLIC;

-- Marking after a kind's limits changed: a job with a group key stays limited (CHECK
-- jobs_group_key_limited), whatever its kind's limits.
-- pgq:function limits_changed

-- The SQL API gains group_key (at the end, with a default: existing calls keep working).
-- pgq:function enqueue
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text) FROM PUBLIC;

-- The replaced functions' EXECUTE grants go to their successors (the roles script grants the new
-- signatures from now on).
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
