-- pgq schema, revision 0020: the trust boundary, round two (issue 40, findings 1, 2, 5, 6 and 8).
--
-- 1. Lease tokens stay secret. `pgq roles` now grants producers (and so workers) SELECT on every
--    column of pgq.jobs but lease_token; the functions a producer or worker may call return no live
--    token of an attempt the caller does not hold:
--      pgq.mark_awaited  returns the marked job with lease_token NULL;
--      pgq.leases_lost   new: which of the (id, token) pairs a worker holds no longer hold their
--                        lease (what sql/job_lease_check.sql read from pgq.jobs.lease_token itself).
--    The claim returns each token to the session that claimed it; the acknowledgements take tokens
--    and return only rows they changed under them. The pgq_cancel notification names the token of
--    an attempt that was just cancelled: dead by then (the job is no longer running).

-- 1. Lease tokens -------------------------------------------------------------------------------

-- pgq:function leases_lost
REVOKE EXECUTE ON FUNCTION pgq.leases_lost(bigint[], uuid[]) FROM PUBLIC;

-- pgq:function mark_awaited

-- 2. Bounded times ------------------------------------------------------------------------------
-- Every time pgq stores is one every reader can read (psycopg reads no 'infinity', no year outside
-- 1..9999), whoever writes it: a function, a worker's acknowledgement, a producer's direct INSERT.
-- Before, one registry row with lease_s 1e12 made pgq.worker_prune raise 'timestamp out of range'
-- inside the rescue's transaction (expired leases stayed running), and one run_at of 'infinity'
-- broke every listing of jobs. The bounds (docs/operations.md, threat model; pgq/bounds.py refuses
-- the same values in the client first, each bound here one step wider for clock differences and
-- lock waits):
--   run_at            from 1900-01-01 UTC to 100 years and a day after now() (delays, debounce,
--                     retry_in and snoozes are at most 100 years);
--   lease_expires_at  from 1900-01-01 UTC to a day and an hour after now() (leases and heartbeat
--                     extensions are at most a day);
--   pgq.workers       lease_s and refresh_s finite, above 0 and at most a day (NaN and Infinity
--                     fail `<= 86400`).
-- A bound that is relative to now() only ever grows: a row that passed it once passes it at any
-- later check (an UPDATE of another column, a restore), so the constraint is stable in effect. Each
-- is a comparison or two on a row being written: nothing a claim or an acknowledgement notices.
-- Rows outside the bounds (written before this revision) are brought inside first: a run_at too
-- early becomes the job's created_at (it was due), one too late the latest allowed; a lease
-- expiring too late expires at the latest allowed, one too early now (the rescue takes it); a
-- registry row's lease_s and refresh_s become at most a day. Rate-limit starts more than a day
-- ahead (a worker could insert them directly before: an 'infinity' start blocked its kind for
-- good) are deleted.

UPDATE pgq.jobs j
SET run_at = CASE WHEN j.run_at < '1900-01-01 00:00:00+00' THEN greatest(j.created_at, '1900-01-01 00:00:00+00')
                  WHEN j.run_at > now() + interval '36526 days' THEN now() + interval '36525 days'
                  ELSE j.run_at END,
    lease_expires_at = CASE WHEN j.lease_expires_at < '1900-01-01 00:00:00+00' THEN now()
                            WHEN j.lease_expires_at > now() + interval '1 day 1 hour' THEN now() + interval '1 day'
                            ELSE j.lease_expires_at END
WHERE j.run_at < '1900-01-01 00:00:00+00' OR j.run_at > now() + interval '36526 days'
   OR j.lease_expires_at < '1900-01-01 00:00:00+00' OR j.lease_expires_at > now() + interval '1 day 1 hour';
ALTER TABLE pgq.jobs
    ADD CONSTRAINT jobs_run_at_bounded
        CHECK (run_at >= '1900-01-01 00:00:00+00' AND run_at <= now() + interval '36526 days'),
    ADD CONSTRAINT jobs_lease_bounded
        CHECK (lease_expires_at >= '1900-01-01 00:00:00+00' AND lease_expires_at <= now() + interval '1 day 1 hour');

UPDATE pgq.workers w
SET lease_s = least(w.lease_s, 86400), refresh_s = least(w.refresh_s, 86400)
WHERE NOT (w.lease_s <= 86400 AND w.refresh_s <= 86400);
ALTER TABLE pgq.workers
    ADD CONSTRAINT workers_lease_s_bounded CHECK (lease_s > 0 AND lease_s <= 86400),
    ADD CONSTRAINT workers_refresh_s_bounded CHECK (refresh_s > 0 AND refresh_s <= 86400),
    DROP CONSTRAINT workers_lease_s_check,
    DROP CONSTRAINT workers_refresh_s_check;

DELETE FROM pgq.rate_limit_starts s WHERE NOT (s.at <= now() + interval '1 day');
DELETE FROM pgq.group_rate_starts s WHERE NOT (s.at <= now() + interval '1 day');

-- 3. Limits through functions -------------------------------------------------------------------
-- A worker stores its tasks' limits at start. It did so with direct INSERT and UPDATE on the limit
-- tables, and it had INSERT and DELETE on pgq.rate_limit_starts (for the claim, which is a definer
-- function and needs none of them): an 'infinity' start blocked a kind for good, a DELETE reset
-- every rate window. Now `pgq roles` grants workers no write on any of these tables; they set limits
-- through these definer functions, which write one row of the named kind, after the checks below
-- and the tables' own (max_running >= 1, per_s in (0, 86400], starts and window given together).
-- Removing a limit (DELETE) stays with the admin. Each returns what its sql/*_set.sql returned.

-- pgq:function concurrency_limit_set
REVOKE EXECUTE ON FUNCTION pgq.concurrency_limit_set(text, integer) FROM PUBLIC;

-- pgq:function rate_limit_set
REVOKE EXECUTE ON FUNCTION pgq.rate_limit_set(text, integer, double precision) FROM PUBLIC;

-- pgq:function group_limits_set
REVOKE EXECUTE ON FUNCTION pgq.group_limits_set(text, integer, integer, double precision) FROM PUBLIC;

-- 4. Sequence tails are pruned ------------------------------------------------------------------
-- pgq.sequence_tails kept one row per (queue, sequence key) ever used. A tail whose job is deleted
-- (purged: it finished) no longer orders anything: the key's next enqueue, finding no tail, starts
-- the sequence anew, exactly as it treats a tail whose job is gone. So the purge deletes it, as it
-- keeps pgq.key_finishes (revision 0018): an AFTER DELETE row trigger whose WHEN lets only rows
-- with a sequence key through (the purge of other rows does no more than before). It skips a tail
-- row a producer holds (the enqueue of the key's next job, which moves the tail on anyway), so the
-- purge never waits for a producer and the two cannot deadlock.

-- pgq:function sequence_tail_prune
REVOKE EXECUTE ON FUNCTION pgq.sequence_tail_prune() FROM PUBLIC;
CREATE TRIGGER jobs_sequence_tail_prune_trg AFTER DELETE ON pgq.jobs
FOR EACH ROW WHEN (OLD.sequence_key IS NOT NULL)
EXECUTE FUNCTION pgq.sequence_tail_prune();
-- Tails of jobs deleted before this revision.
DELETE FROM pgq.sequence_tails t
WHERE t.job_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = t.job_id);
