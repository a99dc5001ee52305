-- job_complete: finish a batch of attempts successfully; one statement for any number of jobs
-- (pgq.complete, revision 0011: SECURITY DEFINER, so a worker needs no UPDATE on pgq.jobs).
-- Fenced: a row changes only while it is still running under the presented lease token; the
-- caller compares the returned ids with the ones it sent to find lost leases.
-- Watermarks: `watermarks` holds, per job, the input watermark the run processed (NULL: none).
-- If a newer watermark arrived while the job ran (input_watermark above the processed one), the
-- job is not finished: it goes back to queued for one more run (a "dirty" re-run), with a fresh
-- series of attempts. Otherwise it succeeds, and the key's processed watermark advances.
-- `progress`: per job, progress its handler reported that no heartbeat stored yet (NULL: none; the
-- whole array NULL when no job of the batch has any).
-- `lock_timeout`: the worker's own acknowledgements (each its own transaction) wait at most this
-- long for a row lock that another transaction holds (a producer's, an operator's), then fail with
-- lock_not_available and are sent again through job_complete_skip.sql, which skips held rows; NULL: wait as
-- long as it takes (a caller's own use). Set (set_config, local) for this statement's transaction only.
SELECT c.id, c.status, c.woke
FROM pgq.complete(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[]::jsonb[],
                  %(watermarks)b::bigint[], %(progress)b::text[]::jsonb[], %(lock_timeout)s::text) c
