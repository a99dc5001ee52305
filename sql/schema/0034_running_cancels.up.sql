-- pgq schema, revision 0034: a running job cancelled without pgq's functions tells its worker again,
-- and a heartbeat locks only the rows whose lease it holds.
--
-- Since revision 0033 an UPDATE of pgq.jobs that cancels a running job moves the row to
-- pgq.finished_jobs (PostgreSQL performs it as a delete and an insert), so the row trigger of UPDATE
-- that revisions 0004 to 0032 notified pgq_cancel from never fires, and nothing told the worker:
-- its handler ran on until its next heartbeat. pgq.cancel, pgq.cancel_core and job_cancel_many
-- notify themselves and insert the history row with its lease cleared; the job's own worker is
-- now told of every other cancel of a running job, once:
--
--   * an UPDATE of pgq.jobs that clears the lease (as before 0033, when the table's CHECK required
--     it): a statement trigger of UPDATE on pgq.jobs compares the rows before and after (transition
--     tables); the token is the old row's. It fires only on UPDATEs of pgq.jobs itself: pgq's hot
--     path updates pgq.live_jobs, and finishes jobs by a delete and an insert.
--   * a job arriving in the history cancelled with its lease still set (an UPDATE of pgq.jobs that
--     left it, or a delete and insert written by hand): the trigger of a cancelled job's arrival,
--     which already checks that an administrator cancels, notifies too. Its WHEN clause is unchanged,
--     so acknowledgements, which insert succeeded and failed jobs, do not run it.
--
-- An UPDATE of pgq.live_jobs cannot cancel a job: the row would leave the partition's bound, and
-- PostgreSQL refuses it.
-- pgq:function jobs_notify_cancel
CREATE TRIGGER jobs_notify_cancel
    AFTER UPDATE ON pgq.jobs
    REFERENCING OLD TABLE AS pgq_before NEW TABLE AS pgq_changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.jobs_notify_cancel();
-- pgq:function jobs_guard_admin_transition

-- The heartbeat locked every row of its batch and renewed only those under the tokens it was sent: a
-- worker whose lease was lost (rescued, claimed again by another worker) locked the new owner's row,
-- and waited for it while the new owner held it. It locks only the rows whose lease it holds, still in
-- id order. (pgq.heartbeat_skip already did.)
-- pgq:function heartbeat
