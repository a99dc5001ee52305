-- pgq schema, revision 0033: finished jobs leave the hot table (issue #43, step 2 of
-- docs/design/lean-table.md).
--
-- pgq.jobs becomes a partitioned table with the same columns, read and written as before:
--
--   pgq.jobs                         LIST (status)
--   ├── pgq.live_jobs                DEFAULT: waiting, queued, running, what claims, heartbeats
--   │                                and acknowledgements touch, with the hot path's indexes
--   └── pgq.finished_jobs            succeeded, failed, cancelled: RANGE (finished_at)
--       ├── finished_jobs_before_0033  every job that finished before this revision (today's table
--       │                              itself, attached, not copied)
--       ├── finished_jobs_YYYYMMDD     one per UTC day, made a week ahead
--       └── finished_jobs_default      a day nobody made a partition for
--
-- pgq's functions move a job that finishes from live_jobs to finished_jobs in one statement (a
-- delete and an insert), so the live table keeps only what can still run; retention drops whole
-- days. An UPDATE of pgq.jobs that changes a job's status moves the row between partitions too
-- (PostgreSQL does it), so SQL written against pgq.jobs keeps working.
--
-- The migration holds pgq.jobs exclusively while it moves the jobs that can still run (only those:
-- the finished ones stay where they are) and proves with one scan that the rest finished before
-- the upgrade (docs/upgrading.md has the times measured).

LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE;

-- What the new pgq.jobs must carry over: the views that read it, its comments and its grants.
CREATE TEMPORARY TABLE pgq_0033_carry ON COMMIT DROP AS
SELECT 'view' AS what, c.oid::regclass::text AS name,
       pg_catalog.pg_get_viewdef(c.oid) AS body, NULL::text AS extra
FROM pg_catalog.pg_class c
WHERE c.relkind = 'v'
  AND c.oid IN (SELECT r.ev_class FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
                WHERE d.refobjid = 'pgq.jobs'::regclass)
UNION ALL
SELECT 'comment', NULL, pg_catalog.obj_description('pgq.jobs'::regclass, 'pg_class'), NULL
UNION ALL
SELECT 'column comment', a.attname, pg_catalog.col_description('pgq.jobs'::regclass, a.attnum), NULL
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = 'pgq.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
  AND pg_catalog.col_description('pgq.jobs'::regclass, a.attnum) IS NOT NULL
UNION ALL
SELECT 'grant', NULL, x.privilege_type,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::regrole::text) END
FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
WHERE c.oid = 'pgq.jobs'::regclass AND x.grantee <> c.relowner
UNION ALL
SELECT 'column grant', a.attname, x.privilege_type,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::regrole::text) END
FROM pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) x
WHERE a.attrelid = 'pgq.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped;

-- Functions whose result is a row of pgq.jobs: that row type goes with the old table (it becomes a
-- partition), so each is made again, with its comment, owner and grants, returning the new table's rows.
CREATE TEMPORARY TABLE pgq_0033_functions ON COMMIT DROP AS
SELECT p.oid, p.oid::regprocedure::text AS signature, pg_catalog.pg_get_functiondef(p.oid) AS body,
       pg_catalog.obj_description(p.oid, 'pg_proc') AS comment, p.proacl, p.proowner::regrole::text AS owner
FROM pg_catalog.pg_proc p
WHERE p.oid IN (SELECT d.objid FROM pg_catalog.pg_depend d
                WHERE d.classid = 'pg_catalog.pg_proc'::regclass
                  AND d.refobjid IN (SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typrelid = 'pgq.jobs'::regclass
                                     UNION ALL
                                     SELECT t.typarray FROM pg_catalog.pg_type t
                                     WHERE t.typrelid = 'pgq.jobs'::regclass));

-- The ids go on from the identity's sequence, which becomes a plain one owned by the new table
-- (a partition cannot keep an identity column from PostgreSQL 17 on).
DO $seq$
DECLARE
    last bigint;
    called boolean;
BEGIN
    SELECT s.last_value, s.is_called INTO last, called FROM pgq.jobs_id_seq s;
    ALTER TABLE pgq.jobs ALTER COLUMN id DROP IDENTITY;
    CREATE SEQUENCE pgq.jobs_id_seq AS bigint;
    PERFORM pg_catalog.setval('pgq.jobs_id_seq', last, called);
END
$seq$;

DROP TRIGGER jobs_notify_cancel ON pgq.jobs;
DROP TRIGGER jobs_notify_finished ON pgq.jobs;
DROP TRIGGER jobs_key_finish_trg ON pgq.jobs;
DROP TRIGGER jobs_sequence_tail_prune_trg ON pgq.jobs;
DROP TRIGGER jobs_json_bounded_insert ON pgq.jobs;
DROP TRIGGER jobs_deleted_keep_counts ON pgq.jobs;
DROP TRIGGER jobs_guard_admin_transition ON pgq.jobs;
DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
DROP TRIGGER jobs_collect_finished ON pgq.jobs;
DROP TRIGGER jobs_release_dependents ON pgq.jobs;
ALTER TABLE pgq.jobs RENAME TO finished_jobs_before_0033;

CREATE TABLE pgq.jobs (
    id               bigint NOT NULL DEFAULT nextval('pgq.jobs_id_seq'),
    queue            text NOT NULL DEFAULT 'default',
    kind             text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}',
    priority         smallint NOT NULL DEFAULT 0,
    status           pgq.job_status NOT NULL DEFAULT 'queued',
    run_at           timestamptz NOT NULL DEFAULT statement_timestamp(),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 25,
    dedupe_key       text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    claimed_by       text,
    last_error       text,
    result           jsonb,
    input_watermark  bigint,
    done_watermark   bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    progress         jsonb,
    awaited          boolean,
    pending_parents  integer,
    has_dependents   boolean,
    limited          boolean NOT NULL DEFAULT false,
    group_key        text,
    trace_context    jsonb,
    sequence_key     text
) PARTITION BY LIST (status);
ALTER SEQUENCE pgq.jobs_id_seq OWNED BY pgq.jobs.id;

-- The jobs that can still run. Fillfactor 50: a claim's new version of a row finds room on its page
-- (one WAL record of the changed bytes instead of a whole row and a lock record). Autovacuum as
-- revisions 0003 and 0010 set it for the old table: by counts of dead rows, not by a share of the table.
CREATE TABLE pgq.live_jobs PARTITION OF pgq.jobs (
    CONSTRAINT live_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT jobs_finished_at_iff_finished
        CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_group_key_limited CHECK (group_key IS NULL OR (limited AND group_key <> '')),
    CONSTRAINT jobs_kind_not_empty CHECK (kind <> ''),
    CONSTRAINT jobs_lease_bounded
        CHECK (lease_expires_at IS NULL OR (lease_expires_at >= '1900-01-01 00:00:00+00'
                                            AND lease_expires_at <= now() + interval '25 hours')),
    CONSTRAINT jobs_lease_iff_running
        CHECK ((status = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT jobs_queue_not_empty CHECK (queue <> ''),
    CONSTRAINT jobs_run_at_bounded
        CHECK (run_at >= '1900-01-01 00:00:00+00' AND run_at <= now() + interval '876624 hours')
) DEFAULT WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
                  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 50000,
                  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000,
                  autovacuum_vacuum_cost_limit = 2000, autovacuum_vacuum_cost_delay = 1);

CREATE UNIQUE INDEX live_jobs_dedupe_active_uq ON pgq.live_jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX live_jobs_dedupe_key_idx ON pgq.live_jobs (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX live_jobs_running_idx ON pgq.live_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX live_jobs_retrying_idx ON pgq.live_jobs (queue) WHERE status = 'queued' AND last_error IS NOT NULL;
CREATE INDEX live_jobs_waiting_idx ON pgq.live_jobs (queue)
    WHERE status NOT IN ('queued', 'running', 'succeeded', 'failed', 'cancelled');
CREATE INDEX live_jobs_claim_idx ON pgq.live_jobs (queue, limited, priority, run_at, id) WHERE status = 'queued';
CREATE INDEX live_jobs_claim_kind_idx ON pgq.live_jobs (queue, kind, priority, run_at, id)
    WHERE status = 'queued' AND limited IS NOT TRUE;
CREATE INDEX live_jobs_claim_limited_idx ON pgq.live_jobs (queue, kind, priority, run_at, id)
    WHERE status = 'queued' AND limited;
CREATE INDEX live_jobs_claim_group_idx ON pgq.live_jobs (queue, kind, group_key, priority, run_at, id)
    WHERE status = 'queued' AND limited;
CREATE INDEX live_jobs_running_group_idx ON pgq.live_jobs (kind, group_key)
    WHERE status = 'running' AND group_key IS NOT NULL;

-- Every finished job, by the UTC day it finished. Its indexes are those of the old table that
-- readers of finished jobs use, with the same definitions, so that the old table's own serve it.
CREATE TABLE pgq.finished_jobs PARTITION OF pgq.jobs (
    CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT jobs_finished_at_iff_finished
        CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_group_key_limited CHECK (group_key IS NULL OR (limited AND group_key <> '')),
    CONSTRAINT jobs_kind_not_empty CHECK (kind <> ''),
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT jobs_queue_not_empty CHECK (queue <> '')
) FOR VALUES IN ('succeeded', 'failed', 'cancelled') PARTITION BY RANGE (finished_at);

CREATE INDEX finished_jobs_finished_idx ON pgq.finished_jobs (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX finished_jobs_failed_idx ON pgq.finished_jobs (queue, finished_at) WHERE status = 'failed';
CREATE INDEX finished_jobs_failed_id_idx ON pgq.finished_jobs (id)
    WHERE status = 'failed' AND id >= -9223372036854775808;
CREATE INDEX finished_jobs_cancelled_idx ON pgq.finished_jobs (queue, finished_at, id)
    WHERE status = 'cancelled' AND id >= -9223372036854775808;
CREATE INDEX finished_jobs_dedupe_idx ON pgq.finished_jobs (queue, dedupe_key, finished_at)
    WHERE dedupe_key IS NOT NULL;

-- The jobs that can still run move; the finished ones stay.
INSERT INTO pgq.live_jobs
SELECT * FROM pgq.finished_jobs_before_0033 WHERE status NOT IN ('succeeded', 'failed', 'cancelled');
DELETE FROM pgq.finished_jobs_before_0033 WHERE status NOT IN ('succeeded', 'failed', 'cancelled');

-- The old table becomes the history's first partition: every job that finished before now (or
-- later, should a row say so). The CHECK proves it, so the ATTACH scans nothing more; its indexes
-- serve the history's. The rest of today gets a partition of its own, as every later day.
DO $attach$
DECLARE
    cutover timestamptz := greatest(statement_timestamp(),
                                    (SELECT max(j.finished_at) + interval '1 microsecond'
                                     FROM pgq.finished_jobs_before_0033 j
                                     WHERE j.status IN ('succeeded', 'failed', 'cancelled')));
    today date := (cutover AT TIME ZONE 'UTC')::date;
    part text := 'finished_jobs_' || to_char(today, 'YYYYMMDD');
BEGIN
    EXECUTE format('ALTER TABLE pgq.finished_jobs_before_0033 ADD CONSTRAINT finished_jobs_before_0033_bound'
                   ' CHECK (status IN (''succeeded'', ''failed'', ''cancelled'')'
                   ' AND finished_at IS NOT NULL AND finished_at < %L)', cutover);
    EXECUTE format('ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.finished_jobs_before_0033'
                   ' FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
    -- The partition's bound says the same from now on.
    ALTER TABLE pgq.finished_jobs_before_0033 DROP CONSTRAINT finished_jobs_before_0033_bound;
    EXECUTE format('CREATE TABLE pgq.%I (LIKE pgq.finished_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    EXECUTE format('CREATE INDEX %I ON pgq.%I (id)', part || '_job_id_idx', part);
    EXECUTE format('ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.%I FOR VALUES FROM (%L) TO (%L)',
                   part, cutover, (today + 1)::text || ' 00:00:00+00');
    EXECUTE format('COMMENT ON TABLE pgq.%I IS %L', part,
                   'The jobs of pgq.finished_jobs that finished on ' || today::text || ' (UTC).');
END
$attach$;

CREATE TABLE pgq.finished_jobs_default PARTITION OF pgq.finished_jobs DEFAULT;
CREATE INDEX finished_jobs_default_job_id_idx ON pgq.finished_jobs_default (id);

-- pgq:function finished_partitions_ensure
REVOKE ALL ON FUNCTION pgq.finished_partitions_ensure(integer) FROM PUBLIC;
SELECT pgq.finished_partitions_ensure(7);

-- Triggers. The live table has only the JSON bounds; what happens when a job finishes fires when it
-- arrives in the history (an INSERT there: pgq's functions insert it, and an UPDATE of pgq.jobs that
-- finishes a job moves it, which PostgreSQL performs as a delete and an insert).
CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.live_jobs
    FOR EACH ROW
    WHEN (NOT ((NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                        AND pg_catalog.pg_column_size(NEW.payload) < 512))
               AND (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                           AND pg_catalog.pg_column_size(NEW.result) < 512))
               AND (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                             AND pg_catalog.pg_column_size(NEW.progress) < 512))
               AND NEW.trace_context IS NULL))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();
-- A finished job arrives with its result and last progress new; its payload and trace context are
-- those it had while live (checked then, or older than revision 0019: a row out of bounds must still
-- be able to finish, as an UPDATE of the status never checked them).
CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (NOT ((NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                       AND pg_catalog.pg_column_size(NEW.result) < 512))
               AND (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                             AND pg_catalog.pg_column_size(NEW.progress) < 512))))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();
CREATE TRIGGER jobs_json_bounded_update
    AFTER UPDATE OF payload, result, progress, trace_context ON pgq.jobs
    FOR EACH ROW
    WHEN ((NOT (NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                        AND pg_catalog.pg_column_size(NEW.payload) < 512))
           AND NEW.payload IS DISTINCT FROM OLD.payload)
          OR (NOT (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                          AND pg_catalog.pg_column_size(NEW.result) < 512))
              AND NEW.result IS DISTINCT FROM OLD.result)
          OR (NOT (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                            AND pg_catalog.pg_column_size(NEW.progress) < 512))
              AND NEW.progress IS DISTINCT FROM OLD.progress)
          OR (NEW.trace_context IS NOT NULL AND NEW.trace_context IS DISTINCT FROM OLD.trace_context))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

-- pgq:function jobs_guard_admin_transition
CREATE TRIGGER jobs_guard_admin_cancel
    AFTER INSERT ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled')
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();
CREATE TRIGGER jobs_guard_admin_transition
    BEFORE UPDATE ON pgq.finished_jobs
    FOR EACH ROW
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();

CREATE TRIGGER jobs_notify_finished
    AFTER INSERT ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (NEW.awaited)
    EXECUTE FUNCTION pgq.jobs_notify_finished();
CREATE TRIGGER jobs_collect_finished
    AFTER INSERT ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents)
    EXECUTE FUNCTION pgq.jobs_collect_finished();
CREATE TRIGGER jobs_release_dependents
    AFTER INSERT ON pgq.finished_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.jobs_release_dependents();
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF status ON pgq.jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.jobs_release_dependents();

CREATE TRIGGER jobs_key_finish_trg
    AFTER DELETE ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (OLD.dedupe_key IS NOT NULL)
    EXECUTE FUNCTION pgq.key_finish_keep();
CREATE TRIGGER jobs_sequence_tail_prune_trg
    AFTER DELETE ON pgq.finished_jobs
    FOR EACH ROW
    WHEN (OLD.sequence_key IS NOT NULL)
    EXECUTE FUNCTION pgq.sequence_tail_prune();
CREATE TRIGGER jobs_deleted_keep_counts
    AFTER DELETE ON pgq.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.finished_counts_keep_deleted();
CREATE TRIGGER jobs_deleted_keep_counts
    AFTER DELETE ON pgq.finished_jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.finished_counts_keep_deleted();

DO $functions$
DECLARE
    f record;
    g record;
BEGIN
    -- The bodies as they are (a later directive of this file may replace one): not checked again.
    PERFORM set_config('check_function_bodies', 'off', true);
    FOR f IN SELECT * FROM pgq_0033_functions ORDER BY signature LOOP
        EXECUTE format('DROP FUNCTION %s', f.oid::regprocedure);
        EXECUTE f.body;
        EXECUTE format('COMMENT ON FUNCTION %s IS %L', f.signature, f.comment);
        IF f.proacl IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
            FOR g IN SELECT x.privilege_type, x.grantee FROM pg_catalog.aclexplode(f.proacl) x LOOP
                EXECUTE format('GRANT %s ON FUNCTION %s TO %s', g.privilege_type, f.signature,
                               CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END);
            END LOOP;
        END IF;
        IF f.owner <> current_user THEN
            EXECUTE format('ALTER FUNCTION %s OWNER TO %I', f.signature, f.owner);
        END IF;
    END LOOP;
    PERFORM set_config('check_function_bodies', 'on', true);
END
$functions$;

-- Row security as revision 0021 set it (scoped role sets add their policies to pgq.jobs).
ALTER TABLE pgq.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_every_row ON pgq.jobs USING (true) WITH CHECK (true);

-- The views, comments and grants of the old table, on the new one.
DO $carry$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM pgq_0033_carry LOOP
        CASE r.what
            WHEN 'view' THEN
                EXECUTE format('CREATE OR REPLACE VIEW %s AS %s', r.name, r.body);
            WHEN 'comment' THEN
                EXECUTE format('COMMENT ON TABLE pgq.jobs IS %L', r.body);
            WHEN 'column comment' THEN
                EXECUTE format('COMMENT ON COLUMN pgq.jobs.%I IS %L', r.name, r.body);
            WHEN 'grant' THEN
                EXECUTE format('GRANT %s ON pgq.jobs TO %s', r.body, r.extra);
            WHEN 'column grant' THEN
                EXECUTE format('GRANT %s (%I) ON pgq.jobs TO %s', r.body, r.name, r.extra);
        END CASE;
    END LOOP;
END
$carry$;
COMMENT ON TABLE pgq.live_jobs IS
    'The jobs of pgq.jobs that can still run (waiting, queued, running): its partition that claims, '
    'heartbeats and acknowledgements touch (revision 0033).';
COMMENT ON TABLE pgq.finished_jobs IS
    'The finished jobs of pgq.jobs (succeeded, failed, cancelled), partitioned by the UTC day they finished '
    '(pgq.finished_partitions_ensure makes the days ahead); retention drops whole days (revision 0033).';
COMMENT ON TABLE pgq.finished_jobs_before_0033 IS
    'The jobs that finished before revision 0033 (the table pgq.jobs was), a partition of pgq.finished_jobs '
    'up to the day after the upgrade. Retention empties it; it stays, empty, for a downgrade.';
COMMENT ON TABLE pgq.finished_jobs_default IS
    'Finished jobs of a day without a partition of its own (none was made ahead in time).';

-- The hot path on the live partition: claims, heartbeats, snoozes, the other fenced writes of a
-- running attempt and the enqueues read and write pgq.live_jobs itself, not the parent (whose
-- statements plan every partition and, as generic plans before PostgreSQL 16, lock each partition
-- and its indexes). Enqueues insert there directly, and their ON CONFLICT names its unique index
-- of active keys; reads that may need finished jobs read pgq.finished_jobs.
-- pgq:function claim
-- pgq:function claim_group_heads
-- pgq:function heartbeat
-- pgq:function heartbeat_skip
-- pgq:function snooze
-- pgq:function snooze_skip
-- pgq:function error_set
-- pgq:function trace_context_set
-- pgq:function limits_changed
-- pgq:function leases_lost
-- pgq:function mark_awaited
-- pgq:function enqueue_many
-- pgq:function enqueue_unique
-- Retention by partition (issue #43, retain43): pgq purge and the workers' retention drop whole days
-- past the horizon, one partition per transaction, before the row deletes of what is left.
-- pgq:function finished_partitions_drop
REVOKE ALL ON FUNCTION pgq.finished_partitions_drop(interval, text, interval) FROM PUBLIC;
-- Cancels, rescues and retries (group cancel43): each moves a job between pgq.live_jobs and
-- pgq.finished_jobs explicitly, a delete and an insert in one statement, instead of an UPDATE of
-- pgq.jobs that PostgreSQL turns into a row movement (a concurrent heartbeat, claim or cancel of the
-- row would then fail instead of finding it gone). A cancel notifies a running job's worker itself
-- (the live table has no cancel trigger). pgq.cancel_core, until now the body that revision 0012
-- renamed from pgq.cancel, gets its own definition here. The triggers that keep a deleted finished
-- job's key finish, sequence tail and counts ignore a job that a retry moved back to live_jobs.
-- pgq:function cancel_core
-- pgq:function cancel
-- pgq:function rescue
-- pgq:function retry
-- pgq:function release_children
-- pgq:function key_finish_keep
-- pgq:function sequence_tail_prune
-- pgq:function finished_counts_keep_deleted

-- A job with dependencies locks only its parents that finished (a live one's move would wait).
-- pgq:function enqueue_after
-- The raises onto active keys fold into, and new runs go to, pgq.live_jobs (its index of active keys).
-- pgq:function settle_raises
-- Acknowledgements (group finish43): pgq.complete and pgq.fail finish a job by moving it from
-- pgq.live_jobs to pgq.finished_jobs explicitly, a delete and an insert in one statement, instead of
-- an UPDATE of pgq.jobs that PostgreSQL turns into a row movement (a concurrent heartbeat, claim or
-- cancel of the row would then fail instead of finding it gone). A job that stays live (a dirty
-- re-run, a retry after its backoff) is updated in pgq.live_jobs. Each statement locks the rows it
-- was sent FOR UPDATE in id order first and decides there, once per row, what each becomes
-- (pgq.complete_core and pgq.fail_core are now their _skip_core variants waiting for every row).
-- pgq.fail_core and pgq.fail_skip_core, until now the bodies that revision 0012 renamed from
-- pgq.fail and pgq.fail_skip, get their own definitions here. 
-- pgq:function complete_core
-- pgq:function complete_skip_core
-- pgq:function fail_core
-- pgq:function fail_skip_core
-- pgq:function fail
-- pgq:function fail_skip

-- Roles (roles43). A partition has grants and row security of its own, and a grant on one lets its
-- holder read or write it directly, past the column grants and policies of pgq.jobs: the partitions
-- are read and written through pgq.jobs alone. The old table, now a partition, gives its row security
-- policies (the scoped role sets' restrictive ones, revision 0021: without them a scoped producer
-- would read every queue through pgq.jobs until its set is applied again) to pgq.jobs, which got its
-- grants above, and keeps none of either. The roles that could insert a job get USAGE on
-- pgq.jobs_id_seq: the identity they inserted with needed no right on its sequence, nextval does.
-- `pgq migrate` then re-runs the roles scripts, which do the same from the catalog.
DO $roles43$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.policyname, p.permissive, p.cmd, p.qual, p.with_check,
                    (SELECT pg_catalog.string_agg(CASE WHEN g = 'public' THEN 'PUBLIC' ELSE pg_catalog.quote_ident(g) END,
                                                  ', ')
                     FROM pg_catalog.unnest(p.roles) g) AS roles
             FROM pg_catalog.pg_policies p
             WHERE p.schemaname = 'pgq' AND p.tablename = 'finished_jobs_before_0033'
             ORDER BY p.policyname LOOP
        IF r.policyname <> 'jobs_every_row' THEN  -- pgq.jobs has its own (above)
            EXECUTE pg_catalog.format('CREATE POLICY %I ON pgq.jobs AS %s FOR %s TO %s', r.policyname, r.permissive,
                                      r.cmd, r.roles)
                    || coalesce(' USING (' || r.qual || ')', '') || coalesce(' WITH CHECK (' || r.with_check || ')', '');
        END IF;
        EXECUTE pg_catalog.format('DROP POLICY %I ON pgq.finished_jobs_before_0033', r.policyname);
    END LOOP;
    ALTER TABLE pgq.finished_jobs_before_0033 DISABLE ROW LEVEL SECURITY;
    FOR r IN SELECT DISTINCT x.grantee
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
             WHERE c.oid = 'pgq.finished_jobs_before_0033'::regclass AND x.grantee <> c.relowner
             UNION
             SELECT x.grantee
             FROM pg_catalog.pg_class c, pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) x
             WHERE c.oid = 'pgq.finished_jobs_before_0033'::regclass AND a.attrelid = c.oid AND a.attnum > 0
               AND x.grantee <> c.relowner LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE pgq.finished_jobs_before_0033 FROM %s',
                                  CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(r.grantee::regrole::text) END);
    END LOOP;
    FOR r IN SELECT DISTINCT extra FROM pgq_0033_carry WHERE what IN ('grant', 'column grant') AND body = 'INSERT' LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE pgq.jobs_id_seq TO %s', r.extra);
    END LOOP;
END
$roles43$;
