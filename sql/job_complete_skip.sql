-- job_complete_skip: job_complete (sql/job_complete.sql) for a worker whose rows another transaction may hold
-- (pgq.complete_skip, revision 0011). Row locks: taken first, in id order, SKIP LOCKED unless `wait`
-- (see job_heartbeat_skip.sql: a producer's or an operator's open transaction may hold a
-- running job's row; one busy row must not hold up the others). Rows still under the presented token
-- in this statement's snapshot but skipped come back with a NULL status (`busy`): not lost, to be
-- sent again. Waiting, a row that changed hands since the snapshot is lost, not busy.
SELECT c.id, c.status, c.woke
FROM pgq.complete_skip(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[]::jsonb[],
                       %(watermarks)b::bigint[], %(progress)b::text[]::jsonb[], %(wait)b::boolean) c
