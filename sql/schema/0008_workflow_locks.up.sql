-- pgq schema, revision 0008: the locks of workflows, taken so that no two transactions wait for
-- each other. (1) pgq.enqueue_after takes its parents' locks without ever waiting while it holds some
-- of them; (2) a statement that finishes parents locks all the children it releases at once, in id
-- order, instead of parent by parent.
--
-- (1) Revision 0007 locked a new job's parents in id order, waiting for each, on the assumption that
-- acknowledgements lock their jobs in that order too. They do not: job_complete and job_fail lock
-- the jobs of a batch in whatever order their plan visits them (the input order, the index's, or
-- the heap's). An enqueue holding parent 1 and waiting for parent 2 while a batch holding 2 waits
-- for 1 is a deadlock, which PostgreSQL breaks after deadlock_timeout (1 s) by failing one side:
-- often the enqueue, whose caller then gets DeadlockDetected. Sorting the batch does not help (the
-- heap's order is not the ids'), and locking a batch's rows in order before updating them would
-- cost every acknowledgement of every job a second write per row.
--
-- So the enqueue takes all its parents' locks at once or none: NOWAIT, in a subtransaction that a
-- refusal rolls back (releasing the locks taken), then a pause of 1 to 10 ms holding nothing, and
-- again. The holders are acknowledgements, heartbeats and claims, a few milliseconds each. A
-- subtransaction per call (only for jobs with dependencies) is the price; a caller enqueueing more
-- than 64 of those one call at a time in one transaction overflows PostgreSQL's cache of
-- subtransaction ids for its duration (use enqueue_many: one call for the batch).
--
-- Same signature: the grants stay.
--
-- (2) Revision 0007's trigger released each finished parent's children in its own call, one call per
-- parent in the order the statement updated them. Two acknowledgements finishing A, B and C, D, with
-- children of A and D and of B and C, could each lock one child and wait for the other: a deadlock,
-- broken after deadlock_timeout (1 s) by failing one acknowledgement, which its worker sends again a
-- second late (a DAG run of three workers took twice as long for one). Now a BEFORE trigger notes
-- every parent the statement finishes (in the transaction-local setting pgq.finished_parents) as the
-- row is updated; the first AFTER call of the statement locks the waiting children of all of them in
-- id order, then marks the edges and counts them off per child, and the statement's other calls find
-- nothing left to do. The note is only a hint: what is released is read from the tables (finished
-- parents, edges without an outcome), so a stray id changes nothing.
-- pgq:function enqueue_after


-- pgq:function jobs_collect_finished

-- Same WHEN clause as jobs_release_dependents: plain column tests, no call for jobs nobody depends on.
CREATE TRIGGER jobs_collect_finished
    BEFORE UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_collect_finished();

-- Same signature, same trigger: the body is replaced.
-- pgq:function jobs_release_dependents
