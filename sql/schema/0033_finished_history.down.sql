-- pgq schema, revision 0033 down: pgq.jobs one table again. The partition of the jobs that finished
-- before 0033 is that table: it takes back every job of the other partitions, its triggers, its
-- identity and the views.

LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE;


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
SELECT 'grant', NULL, x.privilege_type,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::regrole::text) END
FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
WHERE c.oid = 'pgq.jobs'::regclass AND x.grantee <> c.relowner
UNION ALL
SELECT 'column grant', a.attname, x.privilege_type,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::regrole::text) END
FROM pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) x
WHERE a.attrelid = 'pgq.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'sequence', NULL, s.last_value::text, s.is_called::text FROM pgq.jobs_id_seq s;

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

-- Roles (roles43): the row security policies of pgq.jobs (jobs_every_row and the scoped role sets'),
-- which the table it becomes again gets back, with its row security, at the end.
CREATE TEMPORARY TABLE pgq_0033_policies ON COMMIT DROP AS
SELECT p.policyname, p.permissive, p.cmd, p.qual, p.with_check,
       (SELECT pg_catalog.string_agg(CASE WHEN g = 'public' THEN 'PUBLIC' ELSE pg_catalog.quote_ident(g) END, ', ')
        FROM pg_catalog.unnest(p.roles) g) AS roles
FROM pg_catalog.pg_policies p
WHERE p.schemaname = 'pgq' AND p.tablename = 'jobs';

ALTER TABLE pgq.finished_jobs DETACH PARTITION pgq.finished_jobs_before_0033;
ALTER TABLE pgq.finished_jobs_before_0033 DROP CONSTRAINT finished_jobs_before_0033_bound;
INSERT INTO pgq.finished_jobs_before_0033 SELECT * FROM pgq.jobs;

ALTER TABLE pgq.jobs RENAME TO jobs_0033_partitioned;
ALTER TABLE pgq.finished_jobs_before_0033 RENAME TO jobs;
DO $views$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM pgq_0033_carry WHERE what = 'view' LOOP
        EXECUTE format('CREATE OR REPLACE VIEW %s AS %s', r.name, replace(r.body, 'pgq.jobs_0033_partitioned', 'pgq.jobs'));
    END LOOP;
END
$views$;
-- The functions returning rows of pgq.jobs return the old table's again.
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
DROP TABLE pgq.jobs_0033_partitioned;
DROP FUNCTION pgq.finished_partitions_ensure(integer);
-- Retention by partition (retain43).
DROP FUNCTION pgq.finished_partitions_drop(interval, text, interval);

DO $seq$
DECLARE
    last bigint := (SELECT body::bigint FROM pgq_0033_carry WHERE what = 'sequence');
    called boolean := (SELECT extra::boolean FROM pgq_0033_carry WHERE what = 'sequence');
BEGIN
    ALTER TABLE pgq.jobs ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY;
    PERFORM pg_catalog.setval('pgq.jobs_id_seq', last, called);
END
$seq$;

DO $carry$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM pgq_0033_carry WHERE what IN ('comment', 'grant', 'column grant') LOOP
        CASE r.what
            WHEN 'comment' THEN
                EXECUTE format('COMMENT ON TABLE pgq.jobs IS %L', r.body);
            WHEN 'grant' THEN
                EXECUTE format('GRANT %s ON pgq.jobs TO %s', r.body, r.extra);
            WHEN 'column grant' THEN
                EXECUTE format('GRANT %s (%I) ON pgq.jobs TO %s', r.body, r.name, r.extra);
        END CASE;
    END LOOP;
END
$carry$;

-- pgq:function jobs_guard_admin_transition@previous

-- The triggers of revision 0032.
CREATE TRIGGER jobs_notify_cancel
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'cancelled')
    EXECUTE FUNCTION pgq.jobs_notify_cancel();
CREATE TRIGGER jobs_notify_finished
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION pgq.jobs_notify_finished();
CREATE TRIGGER jobs_key_finish_trg
    AFTER DELETE ON pgq.jobs
    FOR EACH ROW
    WHEN (OLD.dedupe_key IS NOT NULL AND OLD.finished_at IS NOT NULL)
    EXECUTE FUNCTION pgq.key_finish_keep();
CREATE TRIGGER jobs_sequence_tail_prune_trg
    AFTER DELETE ON pgq.jobs
    FOR EACH ROW
    WHEN (OLD.sequence_key IS NOT NULL)
    EXECUTE FUNCTION pgq.sequence_tail_prune();
CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.jobs
    FOR EACH ROW
    WHEN (NOT ((NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                        AND pg_catalog.pg_column_size(NEW.payload) < 512))
               AND (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                           AND pg_catalog.pg_column_size(NEW.result) < 512))
               AND (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                             AND pg_catalog.pg_column_size(NEW.progress) < 512))
               AND NEW.trace_context IS NULL))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();
CREATE TRIGGER jobs_deleted_keep_counts
    AFTER DELETE ON pgq.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.finished_counts_keep_deleted();
CREATE TRIGGER jobs_guard_admin_transition
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' OR OLD.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();
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
CREATE TRIGGER jobs_collect_finished
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_collect_finished();
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF status ON pgq.jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.jobs_release_dependents();

-- The hot path's functions as revision 0032 had them, on pgq.jobs (see the up file).
-- pgq:function claim@previous
-- pgq:function claim_group_heads@previous
-- pgq:function heartbeat@previous
-- pgq:function heartbeat_skip@previous
-- pgq:function snooze@previous
-- pgq:function snooze_skip@previous
-- pgq:function error_set@previous
-- pgq:function trace_context_set@previous
-- pgq:function limits_changed@previous
-- pgq:function leases_lost@previous
-- pgq:function mark_awaited@previous
-- pgq:function enqueue_many@previous
-- pgq:function enqueue_unique@previous
-- Cancels, rescues and retries (group cancel43): the definitions of revision 0032. pgq.cancel_core
-- as revision 0012's rename left it (no earlier revision defines it by a CREATE).
CREATE OR REPLACE FUNCTION pgq.cancel_core(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET status = 'cancelled',
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = now()
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running')
    RETURNING j.*;
$fn$;
COMMENT ON FUNCTION pgq.cancel_core(bigint) IS
    'Cancel a queued or running job and return it (no row: no such job, or finished already). A '
    'running job''s worker is told to stop its handler. Needs an administrator (pgq_admin).';
-- pgq:function cancel@previous
-- pgq:function rescue@previous
-- pgq:function retry@previous
-- pgq:function release_children@previous
-- pgq:function key_finish_keep@previous
-- pgq:function sequence_tail_prune@previous
-- pgq:function finished_counts_keep_deleted@previous

-- A job with dependencies locks only its parents that finished (a live one's move would wait).
-- pgq:function enqueue_after@previous
-- The raises onto active keys fold into, and new runs go to, pgq.live_jobs (its index of active keys).
-- pgq:function settle_raises@previous
-- Acknowledgements (group finish43): the definitions of revision 0032. pgq.fail_core and
-- pgq.fail_skip_core as revision 0012's rename left them (no earlier revision defines them by a
-- CREATE): pgq.fail and pgq.fail_skip as revision 0011 defined them, renamed.
-- pgq:function complete_core@previous
-- pgq:function complete_skip_core@previous
CREATE OR REPLACE FUNCTION pgq.fail_core(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    UPDATE pgq.jobs j
    SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                      THEN 'failed' ELSE 'queued' END::pgq.job_status,
        run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                      ELSE now() + make_interval(secs => coalesce(
                          f.retry_in,
                          greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
                 END,
        last_error = f.error,
        progress = coalesce(f.progress, j.progress),
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
    FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
             AS u(id, token, error, retry_in, final, progress)
          ORDER BY u.id) f
    WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
    RETURNING j.*;
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Record failed attempts under their lease tokens (sql/job_fail.sql): the jobs still held, as updated.';

CREATE OR REPLACE FUNCTION pgq.fail_skip_core(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT s.id, s.token FROM unnest(p_ids, p_tokens) AS s(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    failed AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                          THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + make_interval(secs => coalesce(
                              f.retry_in,
                              greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
                     END,
            last_error = f.error,
            progress = coalesce(f.progress, j.progress),
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
                 AS u(id, token, error, retry_in, final, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) f
        WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
        RETURNING j
    )
    SELECT x.j, false FROM failed x
    UNION ALL
    SELECT j, true
    FROM pgq.jobs j
    WHERE NOT p_wait AND j.id = ANY(p_ids)
      AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b));
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql): locks first, in id order, SKIP '
    'LOCKED unless p_wait; rows skipped come back unchanged with busy true.';

-- pgq:function fail@previous
-- pgq:function fail_skip@previous

-- Roles (roles43): pgq.jobs' row security and policies, as they were on the partitioned table.
ALTER TABLE pgq.jobs ENABLE ROW LEVEL SECURITY;
DO $roles43$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM pgq_0033_policies ORDER BY policyname LOOP
        EXECUTE pg_catalog.format('DROP POLICY IF EXISTS %I ON pgq.jobs', r.policyname);
        EXECUTE pg_catalog.format('CREATE POLICY %I ON pgq.jobs AS %s FOR %s TO %s', r.policyname, r.permissive,
                                  r.cmd, r.roles)
                || coalesce(' USING (' || r.qual || ')', '') || coalesce(' WITH CHECK (' || r.with_check || ')', '');
    END LOOP;
END
$roles43$;
