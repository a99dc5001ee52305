-- pgq roles: the three roles pgq needs and their grants, for a DBA to review and run (`pgq roles`
-- prints this script with the role names filled in, in one transaction; `pgq roles --apply` runs it).
-- Idempotent. `pgq migrate` runs it too, in its own transaction, whenever the roles exist, so that
-- objects a newer revision created get their grants and owner without a second command.
-- Needs CREATEROLE for the roles that are missing (roles are cluster-wide) and, for the ownership
-- step, a superuser or the current owner of pgq's objects who is also a member of the admin role.
-- Touches nothing outside schema pgq (and the roles). None of the roles can log in: grant them to
-- your service accounts (GRANT {producer} TO my_web_app;).
--
--   {producer}  enqueue (pgq.enqueue, pgq.enqueue_many: SECURITY DEFINER functions, revision 0002;
--               and INSERT of a new job's input columns, for the one-statement single enqueue)
--               and read jobs (not their lease tokens), views and pgq's other tables (not the
--               worker registry's tokens). No UPDATE or DELETE anywhere: it
--               cannot claim, change or delete a job.
--   {worker}    everything the producer may, plus what a worker process runs: claim, complete,
--               fail, heartbeat, snooze/release and rescue, each through a SECURITY DEFINER function
--               that changes a job only under the lease token of its attempt (the rescue: only
--               attempts whose lease expired), periodic enqueue, and setting (not removing) its
--               tasks' limits through checked functions. No write on any table but the INSERT of
--               a job; no UPDATE of pgq.jobs or pgq.key_watermarks, no DELETE, no
--               TRUNCATE, no DDL: it cannot cancel, retry, or finish a job it does not hold.
--               Retention (deleting old finished jobs) is a purge, so a worker with only this role
--               skips it and logs why.
--   {admin}     owns schema pgq and everything in it: cancel, retry, purge, migrate. Grant it to
--               the account that runs `pgq migrate`, `pgq jobs cancel|retry`, `pgq purge`.

-- 1. The roles, created only when missing; an existing role is left as it is.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {producer_name}) THEN
        CREATE ROLE {producer} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {worker_name}) THEN
        CREATE ROLE {worker} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {admin_name}) THEN
        CREATE ROLE {admin} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT;
    END IF;
END
$roles$;

-- 2. The admin role owns schema pgq and every object in it, so its members can migrate (ALTER and
-- DROP need ownership) and enqueue's SECURITY DEFINER runs with its rights, not a superuser's.
-- Objects are found in the catalog, so those of newer revisions are included without editing this.
ALTER SCHEMA pgq OWNER TO {admin};
DO $owner$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN
        SELECT pg_catalog.format('ALTER %s %s OWNER TO %I',
                                 CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                                WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE'
                                                WHEN 'c' THEN 'TYPE' ELSE 'TABLE' END,
                                 c.oid::pg_catalog.regclass, {admin_name})
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'pgq'::pg_catalog.regnamespace
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c', 'S')
          -- Sequences of identity and serial columns follow their table. (Only sequences: a partition
          -- depends on its table, and a partitioned table on its key columns, the same way.)
          AND NOT (c.relkind = 'S'
                   AND EXISTS (SELECT FROM pg_catalog.pg_depend d
                               WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
                                 AND d.deptype IN ('a', 'i')))
        UNION ALL
        SELECT pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', p.oid::pg_catalog.regprocedure, {admin_name})
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'pgq'::pg_catalog.regnamespace AND p.prokind IN ('f', 'p')
        UNION ALL
        SELECT pg_catalog.format('ALTER %s %s OWNER TO %I', CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END,
                                 t.oid::pg_catalog.regtype, {admin_name})
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'pgq'::pg_catalog.regnamespace AND t.typtype IN ('e', 'd', 'r')
    LOOP
        EXECUTE stmt;
    END LOOP;
END
$owner$;

-- 3. Grants. Everything is revoked first, so the result is exactly what follows, whatever an earlier
-- version of this script granted.
REVOKE ALL ON ALL TABLES IN SCHEMA pgq FROM {producer}, {worker};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgq FROM {producer}, {worker};
REVOKE ALL ON ALL ROUTINES IN SCHEMA pgq FROM {producer}, {worker};

GRANT USAGE ON SCHEMA pgq TO {producer};
-- Read jobs, the views, the version table (clients check the schema revision at start) and the
-- small bookkeeping tables.
GRANT SELECT ON ALL TABLES IN SCHEMA pgq TO {producer};
-- ... except the worker registry's secret tokens (revision 0013): every column of pgq.workers but
-- `token`, which fences each worker's writes to its own row.
REVOKE SELECT ON pgq.workers FROM {producer};
GRANT SELECT (id, claimed_by, host, pid, queues, kinds, slots, lease_s, refresh_s, started_at, last_seen,
              version, state, role) ON pgq.workers TO {producer};
-- ... and pgq.jobs.lease_token (revision 0020): the token fences an attempt's acknowledgements only
-- while it is a secret of the session that claimed it (pgq.claim returns it to that session alone).
-- Every other column, found in the catalog so that columns of newer revisions are included.
REVOKE SELECT ON pgq.jobs FROM {producer};
DO $jobcols$
BEGIN
    EXECUTE (SELECT pg_catalog.format('GRANT SELECT (%s) ON pgq.jobs TO %I',
                                      pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                                      {producer_name})
             FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = 'pgq.jobs'::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attname <> 'lease_token');
END
$jobcols$;
GRANT EXECUTE ON FUNCTION
    pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text, text,
                interval, text, interval),
    pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], bigint[],
                     integer[], text[]),
    -- A dedupe key with unique_for, on_conflict 'replace' or debounce (revision 0018; pgq.key_finishes
    -- stays read-only to producers).
    pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], integer[],
                       text[], double precision[], boolean[], double precision[]),
    -- Jobs with dependencies (Queue.enqueue(depends_on=...)) or a sequence key (revision 0017: the
    -- only way to enqueue one, so that it is chained; pgq.sequence_tails stays read-only to producers).
    pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[], boolean[],
                      integer[], bigint[], text[], text[], boolean[]),
    -- Waiting for a job's outcome (Queue.wait) marks it awaited, so that finishing it notifies; it
    -- returns the job without its lease token (revision 0020).
    pgq.mark_awaited(bigint),
    -- An instrumented client stores the trace context of the jobs it just enqueued (pgq.otel,
    -- revision 0015); only rows its own transaction inserted, and only once.
    pgq.trace_context_set(bigint[], jsonb[])
    TO {producer};

-- A single job without a dedupe key is one plain INSERT (sql/job_insert_one.sql): the columns of a
-- job's input only, so status, attempts and lease columns always take their defaults (queued, 0, none).
GRANT INSERT (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited, group_key)
    ON pgq.jobs TO {producer};
-- A worker is a producer too (handlers enqueue, the periodic step enqueues ticks). Only when it is not
-- one yet: granting a role needs CREATEROLE, which the admin running `pgq migrate` (which re-runs this
-- script) lacks.
DO $member$
BEGIN
    IF NOT pg_catalog.pg_has_role({worker_name}, {producer_name}, 'MEMBER') THEN
        GRANT {producer} TO {worker};
    END IF;
END
$member$;
-- No UPDATE on pgq.jobs, nor INSERT or UPDATE on pgq.key_watermarks (revoked above): a worker
-- writes a job only through the functions granted at the end, which check the lease token. With
-- column UPDATE it could fail another worker's or a queued job (cancelling its dependents), finish
-- another's job, release a waiting one, or write any key's processed watermark.
-- No write on the limit tables either (revision 0020; revoked above): a worker sets its tasks' limits
-- (concurrency, rate, group limits; at start-up) through pgq.concurrency_limit_set,
-- pgq.rate_limit_set and pgq.group_limits_set, granted below, which check what they write. The
-- claim, a definer function, locks limit rows and keeps the windows of starts
-- (pgq.rate_limit_starts, pgq.group_rate_starts) and the groups' turns itself. With direct writes a
-- worker could block a kind for good (a start at 'infinity') or reset every rate window (DELETE).
-- Removing a limit (DELETE) stays with the admin.
-- The claim (SECURITY DEFINER: it reserves, marks and takes rows itself), the marking of a kind's
-- jobs after the worker set a limit of a task, and the acknowledgements of an attempt under its lease
-- token, the rescue of expired leases and the storing of an attempt's last error (revision 0011).
GRANT EXECUTE ON FUNCTION
    pgq.claim(text[], text[], integer, double precision, text),
    pgq.limits_changed(text),
    -- Its tasks' limits (revision 0020).
    pgq.concurrency_limit_set(text, integer),
    pgq.rate_limit_set(text, integer, double precision),
    pgq.group_limits_set(text, integer, integer, double precision),
    pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean),
    pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.rescue(integer),
    pgq.error_set(bigint, uuid, text),
    -- Which attempts the worker holds lost their lease (revision 0020: it may not read the tokens).
    pgq.leases_lost(bigint[], uuid[]),
    -- What a finish could not see (revision 0012): children and waits committed after it.
    pgq.settle(integer),
    -- The worker registry (revision 0013): its own row only, under the token its registration
    -- returned; the prune deletes only rows stale for three leases.
    pgq.worker_register(text, text, integer, text[], text[], integer, double precision, double precision, text),
    pgq.worker_seen(uuid, uuid, text),
    pgq.worker_unregister(uuid, uuid),
    pgq.worker_prune()
    TO {worker};

-- 4. Revision 0021 (nothing squattable). The lock of a maintenance step's leader (pgq.lead: the row
-- lock of the step's row of pgq.leaders) for the worker; the claim's secret (pgq.claim_secret, from
-- which its reservation keys derive) for no role: the SELECT on all tables above included it.
REVOKE SELECT ON pgq.claim_secret FROM {producer};
GRANT EXECUTE ON FUNCTION pgq.lead(text) TO {worker};

-- 5. Revision 0026. A pass of the finished-job counts (pgq.count_finished: it writes only the counts
-- tables, one pass at a time) for the worker, whose maintenance loop runs it.
GRANT EXECUTE ON FUNCTION pgq.count_finished(interval, interval) TO {worker};

-- 6. Revision 0033: pgq.jobs is partitioned (pgq.live_jobs; pgq.finished_jobs and its days). A read
-- or write through pgq.jobs checks the grants and row security policies of pgq.jobs alone, but a
-- grant on a partition lets its holder read or write that partition directly, past the column grant
-- of pgq.jobs (lease tokens) and its policies (a scoped set's queues): partitions have privileges and
-- row security of their own. So no partition keeps a grant of these roles (the SELECT on all tables
-- above included them). They are found in the catalog, so the days made since are included; the days
-- pgq.finished_partitions_ensure makes later are new tables of its owner, granted to nobody.
DO $partitions$
DECLARE
    part pg_catalog.regclass;
BEGIN
    FOR part IN SELECT c.oid FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgq'::pg_catalog.regnamespace AND c.relispartition
                  AND c.relkind IN ('r', 'p', 'f')
                ORDER BY c.oid LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %I, %I', part, {producer_name}, {worker_name});
    END LOOP;
END
$partitions$;
-- A job's id is the nextval of pgq.jobs_id_seq, no longer an identity column (which needed no right on
-- its sequence): the plain INSERT of a job needs USAGE on it, which allows nextval and currval only
-- (not setval: that needs UPDATE).
GRANT USAGE ON SEQUENCE pgq.jobs_id_seq TO {producer};
-- 7. Revision 0033. The day partitions of the finished jobs made ahead (pgq.finished_partitions_ensure:
-- a SECURITY DEFINER function that only creates and attaches empty partitions, from today up to a year
-- ahead, granted to nobody) for the worker, whose maintenance loop runs it so that acknowledgements
-- never land in the default partition. Dropping days (pgq.finished_partitions_drop) deletes jobs: it
-- stays with the admin, as the purge does. (Guarded: the script also runs on older revisions.)
DO $days$
BEGIN
    IF pg_catalog.to_regprocedure('pgq.finished_partitions_ensure(integer)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION pgq.finished_partitions_ensure(integer) TO {worker};
    END IF;
END
$days$;

-- 8. Revision 0035. When the next job of its queues is due (pgq.next_run_at: a SECURITY DEFINER
-- function over the live partition, which the worker may not read), for the worker, which asks it when
-- idle. (Guarded, as above; the migration re-grants.)
DO $next_run_at$
BEGIN
    IF pg_catalog.to_regprocedure('pgq.next_run_at(text[])') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION pgq.next_run_at(text[]) TO {worker};
    END IF;
END
$next_run_at$;
