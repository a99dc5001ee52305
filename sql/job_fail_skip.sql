-- job_fail_skip: job_fail (sql/job_fail.sql) for a worker whose rows another transaction may hold
-- (pgq.fail_skip, revision 0011): locks its rows like job_complete_skip, in id order, SKIP LOCKED
-- unless `wait`; a row skipped comes back with `busy` true (as read in this statement's snapshot,
-- unchanged): not lost, to be sent again.
SELECT (f.job).*, f.busy
FROM pgq.fail_skip(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[], %(retry_in)b::double precision[],
                   %(finals)b::boolean[], %(progress)b::text[]::jsonb[], %(wait)b::boolean) f
