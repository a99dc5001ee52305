-- Reverts revision 0012: pgq.enqueue_after locks its parents FOR NO KEY UPDATE and marks them
-- has_dependents, pgq.mark_awaited marks the job awaited, and the release trigger alone releases
-- children. (alembic/versions/0012_producer_locks.py then restores the trigger's body of 0009.)

-- What the old mechanism needs to see: parents with open edges marked, waits on the jobs.
UPDATE pgq.jobs j SET has_dependents = true
WHERE j.id IN (SELECT d.parent_id FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL)
  AND j.status IN ('waiting', 'queued', 'running') AND j.has_dependents IS NOT TRUE;
UPDATE pgq.jobs j SET awaited = true
WHERE j.id IN (SELECT a.job_id FROM pgq.awaited_jobs a)
  AND j.status IN ('waiting', 'queued', 'running') AND j.awaited IS NOT TRUE;

DROP FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text);
DROP FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean);
DROP FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text);
DROP FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean);
DROP FUNCTION pgq.cancel(bigint);
ALTER FUNCTION pgq.complete_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) RENAME TO complete;
ALTER FUNCTION pgq.complete_skip_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) RENAME TO complete_skip;
ALTER FUNCTION pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) RENAME TO fail;
ALTER FUNCTION pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    RENAME TO fail_skip;
ALTER FUNCTION pgq.cancel_core(bigint) RENAME TO cancel;

-- Revision 0011's rescue.
-- pgq:function rescue@previous

-- Revision 0010's enqueue_after.
-- pgq:function enqueue_after@previous

-- Revision 0007's mark_awaited.
-- pgq:function mark_awaited@previous

DROP FUNCTION pgq.settle(integer);
DROP FUNCTION pgq.after_finish(bigint[]);
DROP FUNCTION pgq.release_children(bigint[]);
DROP INDEX pgq.job_dependencies_open_idx;
DROP TABLE pgq.awaited_jobs;
