-- pgq schema, revision 0025 down: the functions as earlier revisions defined them, pgq.paused_queues
-- without paused_role, and no pgq.control_audit (its rows are lost). pgq.job_audit keeps its rows.
DROP FUNCTION pgq.cancel(bigint, text);
-- pgq:function cancel@previous
DROP FUNCTION pgq.pause(text, text);
-- pgq:function pause@previous
DROP FUNCTION pgq.resume(text, text);
-- pgq:function resume@previous
-- pgq:function explain@previous
DROP FUNCTION pgq.retry(bigint, text);

ALTER TABLE pgq.paused_queues DROP COLUMN paused_role;
ALTER TABLE pgq.paused_queues ALTER COLUMN paused_by SET DEFAULT current_user;
COMMENT ON COLUMN pgq.paused_queues.paused_by IS 'The role that paused it.';
COMMENT ON TABLE pgq.job_audit IS
    'Actions on jobs: one row per bulk batch (its own transaction) or per single action of the '
    'dashboard, with the jobs it changed. The jobs of a deleted batch are gone; their ids stay here.';
COMMENT ON COLUMN pgq.job_audit.actor IS 'Who asked, when known: the dashboard''s user; NULL from the API and CLI (see db_role).';

DROP TABLE pgq.control_audit;
