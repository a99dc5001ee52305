-- job_heartbeat_skip: job_heartbeat (sql/job_heartbeat.sql) for a worker whose rows another transaction may hold
-- (pgq.heartbeat_skip, revision 0011).
--
-- Never waits on another transaction's row lock unless asked (`wait`): a producer's open transaction
-- may hold the row of a job it named in `depends_on`, in a watermark enqueue or in pgq.mark_awaited
-- until it commits, and a claimer may hold a running row for a moment. Waiting there would hold up
-- the renewal of every other lease in the batch (and a watchdog cutting the statement would lose
-- them all). So the rows are locked first, in id order (one global order: no deadlock with
-- statements that lock the same rows in id order), SKIP LOCKED, and only those are renewed. Rows
-- of the batch still under the presented token in this statement's snapshot but skipped come back
-- as `busy` (NULL lease_expires_at): not lost, just not renewable now. The caller renews those with
-- `wait` = true, which waits for each row's lock in id order; meanwhile the waiter holds the row's
-- tuple lock, so job_rescue (SKIP LOCKED) leaves the row alone, and when the producer commits, the
-- renewal gets the row first. A waited renewal runs its lease from the clock when it got the row
-- (clock_timestamp()), not from when the statement began (now()).
-- Ids missing from the result lost their lease (cancelled, rescued, finished elsewhere).
SELECT h.id, h.lease_expires_at
FROM pgq.heartbeat_skip(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
                        %(progress)b::text[]::jsonb[], %(wait)b::boolean) h
