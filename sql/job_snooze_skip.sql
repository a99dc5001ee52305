-- job_snooze_skip: job_snooze (sql/job_snooze.sql) for a worker whose rows another transaction may hold
-- (pgq.snooze_skip, revision 0011): locks its rows like job_complete_skip, in id order, SKIP LOCKED
-- unless `wait`; a row skipped comes back with `busy` true (as read in this statement's snapshot,
-- unchanged): not lost, to be sent again.
SELECT (s.job).*, s.woke, s.busy
FROM pgq.snooze_skip(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
                     %(progress)b::text[]::jsonb[], %(wait)b::boolean) s
