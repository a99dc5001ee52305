-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: what every layout installs
-- first, in its own schema (@schema@ is replaced by its name).
CREATE SCHEMA @schema@;

-- Values a caller gives are checked by domains (A, B, H) instead of CHECK constraints: a session keeps a
-- domain's constraints compiled, while PostgreSQL 15 rebuilds a table's CHECKs from their text for
-- every INSERT and UPDATE statement (about 26,000 instructions per CHECK and statement).
CREATE DOMAIN @schema@.label AS text CHECK (VALUE <> '');
CREATE DOMAIN @schema@.attempt_limit AS integer CHECK (VALUE >= 1);
CREATE DOMAIN @schema@.due_time AS timestamptz
    CHECK (VALUE >= '1900-01-01 00:00:00+00' AND VALUE <= now() + interval '876624 hours');
CREATE DOMAIN @schema@.lease_time AS timestamptz
    CHECK (VALUE >= '1900-01-01 00:00:00+00' AND VALUE <= now() + interval '25 hours');
-- Revision 0019's bounds, the insert trigger's WHEN clause as the fast path.
CREATE DOMAIN @schema@.job_json AS jsonb
    CHECK ((pg_catalog.pg_column_compression(VALUE) IS NULL AND pg_catalog.pg_column_size(VALUE) < 512)
           OR pgq.json_bounded(VALUE));
CREATE DOMAIN @schema@.trace_json AS jsonb CHECK (pgq.trace_context_valid(VALUE));

-- What a claim returns: the columns sql/job_claim.sql reads from pgq.claim.
CREATE TYPE @schema@.claimed AS (
    id bigint, queue text, kind text, payload jsonb, priority smallint, status text,
    run_at timestamptz, attempts integer, max_attempts integer, dedupe_key text, lease_token text,
    lease_expires_at timestamptz, claimed_by text, last_error text, result jsonb,
    input_watermark bigint, done_watermark bigint, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, progress jsonb, group_key text, sequence_key text
);

-- What pgq.claim checks before its lone path (revision 0024), for the prototype's claims of one
-- queue and one kind: the queue is not paused (else no claim), no kind has a limit (the prototype
-- has no limited path), and it takes the queue's claim key, exclusively. `lock_free`: the claim
-- takes its rows without locking them, which only a claim alone in its queue may do.
CREATE FUNCTION @schema@.claim_may_run(queues text[], kinds text[], lock_free boolean) RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    IF cardinality(queues) <> 1 OR cardinality(kinds) <> 1 THEN
        RAISE EXCEPTION 'prototype: a claim of one queue and one kind';
    END IF;
    IF EXISTS (SELECT 1 FROM pgq.paused_queues p WHERE p.queue = queues[1]) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pgq.concurrency_limits UNION ALL SELECT 1 FROM pgq.rate_limits) THEN
        RAISE EXCEPTION 'prototype: no limited path';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('/queue/' || queues[1], 0)) AND lock_free THEN
        RAISE EXCEPTION 'prototype: the lock-free claim runs alone in its queue';
    END IF;
    RETURN true;
END;
$fn$;

-- Whether a finished attempt must run again (pgq.complete_core's test, revision 0016): its job
-- got a newer input watermark than the run processed, on its row or as a raise of its key.
-- A plain SQL expression, inlined where it is used.
CREATE FUNCTION @schema@.rerun(input_watermark bigint, processed bigint, queue text, dedupe_key text)
RETURNS boolean
LANGUAGE sql STABLE
AS $fn$
    SELECT (input_watermark > coalesce(processed, input_watermark - 1)
            OR (dedupe_key IS NOT NULL
                AND pgq.key_raised(queue, dedupe_key) > coalesce(processed, pgq.key_raised(queue, dedupe_key) - 1)))
           IS TRUE
$fn$;

-- pgq.after_finish's two probes, run by every acknowledgement after its statement: parents whose
-- children wait (their release, pgq.release_children, is not part of the prototype) and waiters
-- (pgq.awaited_jobs) of the jobs among `ids` that left `live`, who are notified.
CREATE FUNCTION @schema@.after_finish(ids bigint[], live regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    told bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = ANY(ids) AND d.parent_outcome IS NULL) THEN
        NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM pgq.awaited_jobs a WHERE a.job_id = ANY(ids)) THEN
        EXECUTE format('WITH gone AS (DELETE FROM pgq.awaited_jobs a WHERE a.job_id = ANY($1) '
                       'AND NOT EXISTS (SELECT 1 FROM %s j WHERE j.id = a.job_id) RETURNING a.job_id) '
                       'SELECT count(pg_notify(''pgq_finished'', g.job_id::text)) FROM gone g', live)
        INTO told USING ids;
    END IF;
END;
$fn$;
