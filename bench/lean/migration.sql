-- Issue #43 prototype (bench/lean_prototype.py migration), not a pgq migration: today's pgq.jobs
-- becomes the lean layout (A) without copying its finished rows and without a long exclusive lock.
-- Layout A is installed first in schema lean_m (live table and history, partitions from the cutover
-- day on). The script runs each step below in a transaction of its own (steps that build or drop
-- indexes CONCURRENTLY statement by statement, outside any) and prints the time it took, its WAL
-- and the relation locks it held until its end. @cutover@: the start of the first day whose
-- partition is a new one (every finished row of today's table is older).

-- step: 1. online: the history's indexes built on today's table (CREATE INDEX CONCURRENTLY)
-- The history's partitioned indexes then find their match on the table being attached, and
-- ATTACH PARTITION builds nothing under its lock. (jobs_failed_idx matches job_history_failed.)
CREATE INDEX CONCURRENTLY jobs_history_id ON pgq.jobs (id);
CREATE INDEX CONCURRENTLY jobs_history_finished_brin ON pgq.jobs USING brin (finished_at) WITH (autosummarize = on);

-- step: 2. the swap: the live rows move to the live table, today's table becomes the legacy history
-- The one exclusive lock of the migration on pgq.jobs, held for as long as moving the jobs that can
-- still run takes (the backlog, not the history). Catalog changes otherwise: its triggers go (the
-- history's own apply once it is a partition), ids continue from the highest, and pgq.jobs becomes
-- a view over the live table and the history for the readers that name it; until step 5 attaches
-- the legacy table, the view reads it too (lean_m.legacy_unattached).
LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT g.tgname FROM pg_trigger g WHERE g.tgrelid = 'pgq.jobs'::regclass AND NOT g.tgisinternal LOOP
        EXECUTE format('DROP TRIGGER %I ON pgq.jobs', t);
    END LOOP;
END
$$;
WITH moved AS (
    DELETE FROM pgq.jobs j WHERE j.status IN ('waiting', 'queued', 'running') RETURNING j.*
)
INSERT INTO lean_m.jobs (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key,
                         lease_token, lease_expires_at, claimed_by, last_error, input_watermark, done_watermark,
                         created_at, started_at, progress, awaited, pending_parents, has_dependents, limited,
                         group_key, trace_context, sequence_key)
SELECT m.id, m.queue, m.kind, m.payload, m.priority, m.status, m.run_at, m.attempts, m.max_attempts, m.dedupe_key,
       m.lease_token, m.lease_expires_at, m.claimed_by, m.last_error, m.input_watermark, m.done_watermark,
       m.created_at, m.started_at, m.progress, m.awaited, m.pending_parents, m.has_dependents, m.limited,
       m.group_key, m.trace_context, m.sequence_key
FROM moved m;
SELECT setval('lean_m.jobs_id_seq', (SELECT s.last_value FROM pg_sequences s
                                      WHERE format('%I.%I', s.schemaname, s.sequencename)
                                            = pg_get_serial_sequence('pgq.jobs', 'id')));
ALTER TABLE pgq.jobs ALTER COLUMN id DROP IDENTITY;
ALTER TABLE pgq.jobs RENAME TO jobs_legacy;
CREATE VIEW lean_m.legacy_unattached AS SELECT * FROM pgq.jobs_legacy;
CREATE VIEW pgq.jobs AS
    SELECT j.id, j.queue::text, j.kind::text, j.payload::jsonb, j.priority, j.status, j.run_at::timestamptz,
           j.attempts, j.max_attempts::integer, j.dedupe_key, j.lease_token, j.lease_expires_at::timestamptz,
           j.claimed_by, j.last_error, NULL::jsonb AS result, j.input_watermark, j.done_watermark, j.created_at,
           j.started_at, NULL::timestamptz AS finished_at, j.progress::jsonb, j.awaited, j.pending_parents,
           j.has_dependents, j.limited, j.group_key, j.trace_context::jsonb, j.sequence_key
    FROM lean_m.jobs j
    UNION ALL
    SELECT h.id, h.queue, h.kind, h.payload, h.priority, h.status, h.run_at, h.attempts, h.max_attempts,
           h.dedupe_key, h.lease_token, h.lease_expires_at, h.claimed_by, h.last_error, h.result,
           h.input_watermark, h.done_watermark, h.created_at, h.started_at, h.finished_at, h.progress, h.awaited,
           h.pending_parents, h.has_dependents, h.limited, h.group_key, h.trace_context, h.sequence_key
    FROM lean_m.job_history h
    UNION ALL
    SELECT * FROM lean_m.legacy_unattached;

-- step: 3. the legacy rows' bound, declared (a brief exclusive lock, no scan)
ALTER TABLE pgq.jobs_legacy ADD CONSTRAINT jobs_legacy_bound
    CHECK (finished_at IS NOT NULL AND finished_at < '@cutover@') NOT VALID;

-- step: 4. the bound validated (SHARE UPDATE EXCLUSIVE: reads and writes go on while it scans)
ALTER TABLE pgq.jobs_legacy VALIDATE CONSTRAINT jobs_legacy_bound;

-- step: 5. attach: the legacy table as the history's first partition, its bound proven by the CHECK
-- SET NOT NULL and ATTACH PARTITION both skip their scan: the validated CHECK implies them. The
-- history itself is locked SHARE UPDATE EXCLUSIVE: acknowledgements insert into it meanwhile.
ALTER TABLE pgq.jobs_legacy ALTER COLUMN finished_at SET NOT NULL;
ALTER TABLE lean_m.job_history ATTACH PARTITION pgq.jobs_legacy FOR VALUES FROM (MINVALUE) TO ('@cutover@');
CREATE OR REPLACE VIEW lean_m.legacy_unattached AS SELECT * FROM pgq.jobs_legacy WHERE false;

-- step: 6. online: the legacy table's indexes that the history does not use dropped (DROP INDEX CONCURRENTLY)
DROP INDEX CONCURRENTLY pgq.jobs_claim_idx;
DROP INDEX CONCURRENTLY pgq.jobs_claim_kind_idx;
DROP INDEX CONCURRENTLY pgq.jobs_claim_limited_idx;
DROP INDEX CONCURRENTLY pgq.jobs_claim_group_idx;
DROP INDEX CONCURRENTLY pgq.jobs_running_idx;
DROP INDEX CONCURRENTLY pgq.jobs_running_group_idx;
DROP INDEX CONCURRENTLY pgq.jobs_waiting_idx;
DROP INDEX CONCURRENTLY pgq.jobs_retrying_idx;
DROP INDEX CONCURRENTLY pgq.jobs_dedupe_active_uq;
DROP INDEX CONCURRENTLY pgq.jobs_finished_idx;

-- step: 7. the legacy table's primary key dropped (a brief exclusive lock on it: the history's id index serves)
ALTER TABLE pgq.jobs_legacy DROP CONSTRAINT jobs_pkey;
