-- pgq schema, revision 0012: a producer holds no lock that a worker or an admin waits for.
--
-- Until now two of the producer's functions wrote rows of jobs that already existed, inside the
-- producer's own transaction, which it may leave open for as long as it likes:
--   pgq.enqueue_after  set has_dependents on each unfinished parent (so that the parent's finish ran
--                      the release trigger) after locking the parents FOR NO KEY UPDATE;
--   pgq.mark_awaited   set awaited on the job (so that its finish notified pgq_finished).
-- Each row so written stayed locked until the producer committed: the parent's worker could not
-- renew its lease nor acknowledge it, and an admin could not cancel it.
--
-- Now neither writes the job:
--   * pgq.enqueue_after takes FOR KEY SHARE on the parents (the lock a foreign key check takes),
--     which only a deletion or a key change waits for: every UPDATE of a job (claim, heartbeat,
--     acknowledgement, cancel) goes through. It only keeps pgq.purge from deleting a parent the new
--     edges name before they commit (purge skips locked rows).
--   * pgq.mark_awaited records the wait in pgq.awaited_jobs, a table of its own.
-- Whoever finishes a job now looks for its open edges and its waiters itself: the functions that
-- finish jobs (pgq.complete, complete_skip, fail, fail_skip, cancel, rescue) end with
-- pgq.after_finish(ids), one probe of a partial index of the open edges and one of
-- pgq.awaited_jobs per batch, which releases or cancels the children (pgq.release_children, the
-- release trigger's work made callable) and notifies the waiters.
--
-- What a finish cannot see: edges and waits committed after its statement read them (the
-- producer's transaction was still open). pgq.settle(lim), which every worker runs each second (one
-- at a time: an advisory lock) and the rescue too, settles those: open edges of finished parents,
-- waits of finished jobs. That is the bound a producer's open transaction puts on a child or a
-- waiter: the child of a parent that finished while the producer's transaction was open is released
-- about a second after the producer commits.
--
-- The release trigger stays for the rows revision 0007..0011 marked has_dependents (and for a DBA's
-- own UPDATE of such a row); it now calls pgq.release_children too. pgq.jobs.awaited likewise keeps
-- notifying for the marks made before this revision.

CREATE TABLE pgq.awaited_jobs (
    job_id     bigint PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgq.awaited_jobs IS
    'Jobs a client waits for (Queue.wait, pgq.mark_awaited): finishing one notifies channel '
    'pgq_finished with its id and deletes its row. No foreign key: marking locks no job.';
COMMENT ON COLUMN pgq.awaited_jobs.job_id IS 'The awaited job (pgq.jobs.id).';
COMMENT ON COLUMN pgq.awaited_jobs.created_at IS 'When the wait was marked.';

-- The open edges: what a finish and the settle sweep look up (small: the edges of waiting jobs).
CREATE INDEX job_dependencies_open_idx ON pgq.job_dependencies (parent_id) WHERE parent_outcome IS NULL;

-- Release the waiting children of the finished jobs among `finished` (others and jobs without open
-- edges are ignored): record each parent's outcome on its edges, cancel the children that needed a
-- parent that did not succeed (and, in turn, theirs), count the rest off and queue those with no
-- parent left. Returns the jobs it cancelled. Locks up front, in id order, every waiting job it can
-- change (the children, and the closure a cascade of cancellations can reach), as revision 0009's
-- trigger did; inside a cascade already locked (pgq.cascade_locked on) it locks nothing more.
-- pgq:function release_children
REVOKE EXECUTE ON FUNCTION pgq.release_children(bigint[]) FROM PUBLIC;

-- What a statement that finished jobs owes them: their children released, their waiters told.
-- pgq:function after_finish
REVOKE EXECUTE ON FUNCTION pgq.after_finish(bigint[]) FROM PUBLIC;

-- The sweep: what finishes could not see because a producer committed after them.
-- pgq:function settle
REVOKE EXECUTE ON FUNCTION pgq.settle(integer) FROM PUBLIC;

-- The release trigger (rows marked has_dependents before this revision): the same work, callable.
-- pgq:function jobs_release_dependents

-- The parents: FOR KEY SHARE (no UPDATE waits for it), and no write to them.
-- pgq:function enqueue_after

-- A wait is a row of pgq.awaited_jobs; the job is not written. Same signature and contract: the job
-- if this statement marked it (waiting, queued or running, not marked yet), no row otherwise.
-- pgq:function mark_awaited

-- The finishing functions: each becomes its former body (renamed *_core; the worker's functions
-- executable by their owner only) followed by pgq.after_finish of the batch; the rescue is rewritten
-- below.
ALTER FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) RENAME TO complete_core;
ALTER FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) RENAME TO complete_skip_core;
ALTER FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) RENAME TO fail_core;
ALTER FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    RENAME TO fail_skip_core;
ALTER FUNCTION pgq.cancel(bigint) RENAME TO cancel_core;
REVOKE EXECUTE ON FUNCTION
    pgq.complete_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    FROM PUBLIC;

-- pgq:function complete

-- pgq:function complete_skip

-- pgq:function fail

-- pgq:function fail_skip

-- The rescue locks expired rows FOR NO KEY UPDATE now (was FOR UPDATE, which waited for, and so
-- skipped, a parent a producer holds FOR KEY SHARE), then settles what finishes could not see.
-- pgq:function rescue

-- pgq:function cancel

REVOKE EXECUTE ON FUNCTION
    pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean),
    pgq.rescue(integer)
    FROM PUBLIC;
-- pgq.cancel and pgq.cancel_core run as their caller, as pgq.cancel always did: executable by anyone,
-- the table's grants decide (only the admin role may update pgq.jobs).
