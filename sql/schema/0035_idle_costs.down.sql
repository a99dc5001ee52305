-- pgq schema, revision 0035 down: the idle query reads pgq.jobs again (sql/job_next_run_at.sql of
-- revision 0034's release did), settle plans its reads whatever is to settle, acknowledgements sort
-- the rows they insert into the history, and the live partition's CHECK of finished_at is 0033's.

ALTER TABLE pgq.live_jobs DROP CONSTRAINT jobs_finished_at_iff_finished,
    ADD CONSTRAINT jobs_finished_at_iff_finished
        CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL));
-- pgq:function fail_skip_core@previous
-- pgq:function complete_skip_core@previous
-- pgq:function settle_raises@previous
-- pgq:function settle@previous
DROP FUNCTION pgq.next_run_at(text[]);
