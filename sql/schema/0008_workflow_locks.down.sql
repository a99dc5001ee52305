-- Reverts revision 0008: pgq.enqueue_after waits for each parent's lock in id order again, and the
-- release trigger handles one parent per call, as revision 0007 made them. Same signatures: the
-- grants stay.
DROP TRIGGER jobs_collect_finished ON pgq.jobs;
DROP FUNCTION pgq.jobs_collect_finished();

-- pgq:function enqueue_after@previous

-- pgq:function jobs_release_dependents@previous
