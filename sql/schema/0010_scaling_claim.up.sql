-- pgq schema, revision 0010: a claim that scales with worker processes and stays O(batch) with
-- limits defined; enqueues timed from their statement and keyed batches in one lock order.
--
-- (1) The claim is one function, pgq.claim, run in one round trip. Until now a claim was one
-- statement, `SELECT ... FOR UPDATE SKIP LOCKED` feeding an UPDATE. Under READ COMMITTED such a
-- statement, meeting a row that another claim took and committed after the statement's snapshot
-- (still "queued" in that snapshot), locks the row's newest version, finds it no longer queued and
-- leaves it out, but keeps the lock until it commits. With many worker processes all reading the
-- head of one queue, every claim locked dozens of rows other workers were running, and their
-- completions waited for it (Lock:transactionid: 313 of 381 blocker samples at 16 processes).
-- pgq.claim never row-locks a row it has not already seen queued in a snapshot newer than every
-- claim that could have taken it:
--   a. reserve: read the head of the queue without row locks, reserving each row with a
--      transaction-level advisory lock (try, never wait: a row another claim reserved is skipped,
--      so concurrent claims spread over the head instead of fighting for the same rows);
--   b. take: in a new statement, so a new snapshot, lock and update the reserved rows still queued.
--      A claim that took a reserved row committed before (a) reserved it, so (b)'s snapshot sees
--      it running and leaves it unlocked; none can take it after, since the reservation is held.
-- Advisory locks use the two-key form with key1 = 1885827427 ("pgqc"); key2 is the job id modulo
-- 2^31 (two ids that share it only make one claim skip the other's row for a moment). A claim
-- holds at most 256 of them (it takes no more rows than that; pgq asks again for more). A row a
-- concurrent claim took between this claim's snapshot and its reservation is lost at the take;
-- the claim then reserves again for what it lost, at most twice, rather than come back short.
-- Claiming in one pass when no other claim of the queue seemed under way was tried and dropped:
-- claims that arrive meanwhile must either wait for it (they queued behind each other: 38k jobs/s
-- at 4 processes on 16 cores, against 65k before) or claim in one pass too (the stale locks came
-- back: 408 Lock:transactionid samples at 16 processes).
--
-- (2) Limits no longer make claims scan the backlog. A job of a kind with a concurrency or rate
-- limit is marked `limited` when it is enqueued (or when its kind gets its first limit), and sits
-- in its own index, jobs_claim_limited_idx (queue, kind, ...). jobs_claim_idx gains `limited` after
-- `queue`, so the claim of unlimited work reads only unlimited rows, in order, however many limited
-- jobs wait ahead of them. Limited kinds are claimed per kind, through their own index, taking at
-- most as many as the kind's limits leave free; only the limit rows of kinds that have queued jobs
-- in the claimer's queues are locked (SKIP LOCKED, in kind order), so a claimer never holds, nor
-- waits for, the limit rows of other queues' kinds. The mark is an index hint, never trusted for
-- exactness: a row of a limited kind found unmarked (a DBA's INSERT, a race with the limit's
-- definition) is marked by the claim that meets it and never claimed as unlimited; a marked row
-- whose kind has no limit any more is claimed as unlimited work.
--
-- (3) Enqueues count `delay` and the default run_at from statement_timestamp(), not now() (the
-- start of the caller's transaction): a job enqueued with delay=2 three seconds into a transaction
-- was overdue when it committed. statement_timestamp() rather than clock_timestamp(): every job of
-- one statement gets the same time, so their run_at order stays their id order.
--
-- (4) pgq.enqueue_many inserts keyed rows in (queue, dedupe_key) order, not the caller's: two
-- batches of the same keys in opposite orders deadlocked on the unique index.

ALTER TABLE pgq.jobs ADD COLUMN limited boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN pgq.jobs.limited IS
    'True when the job''s kind had a concurrency or rate limit at enqueue (or got one since): the job '
    'is then claimed through jobs_claim_limited_idx, per kind, as the limits allow. An index hint: '
    'claims check the limits themselves.';
ALTER TABLE pgq.jobs ALTER COLUMN run_at SET DEFAULT statement_timestamp();

-- Jobs of kinds that have limits now.
UPDATE pgq.jobs j SET limited = true
WHERE j.status::text IN ('waiting', 'queued')
  AND j.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION SELECT r.kind FROM pgq.rate_limits r);

DROP INDEX pgq.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON pgq.jobs (queue, limited, priority, run_at, id) WHERE status = 'queued';
COMMENT ON INDEX pgq.jobs_claim_idx IS
    'Queued jobs per queue, unlimited ones (limited = false) first, each part in claim order.';
CREATE INDEX jobs_claim_limited_idx ON pgq.jobs (queue, kind, priority, run_at, id)
    WHERE status = 'queued' AND limited;
COMMENT ON INDEX pgq.jobs_claim_limited_idx IS
    'Queued jobs of limited kinds, per queue and kind in claim order: the claim of a limited kind.';

-- The producer role inserts single jobs with a plain INSERT of a job's input columns
-- (sql/job_insert_one.sql), which now include `limited`: roles that may insert those get it too.
DO $grant$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee
        FROM information_schema.column_privileges a
        WHERE a.table_schema = 'pgq' AND a.table_name = 'jobs' AND a.column_name = 'input_watermark'
          AND a.privilege_type = 'INSERT' AND a.grantee <> current_user
          AND a.grantee IN (SELECT rolname FROM pg_catalog.pg_roles)
    LOOP
        EXECUTE format('GRANT INSERT (limited) ON pgq.jobs TO %I', r.grantee);
    END LOOP;
END
$grant$;

-- Enqueues: statement_timestamp(), the `limited` mark, keyed rows in key order (see the top).
-- pgq:function enqueue_many


-- pgq:function enqueue_after



-- pgq:function claim
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;

-- Mark or unmark the queued and waiting jobs of a kind after its limits changed (called by the
-- statements that set and remove limits). Rows another transaction holds are skipped: the claim
-- corrects any row it meets (see above).
-- pgq:function limits_changed
REVOKE EXECUTE ON FUNCTION pgq.limits_changed(text) FROM PUBLIC;
