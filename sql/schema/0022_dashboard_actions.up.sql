-- pgq schema, revision 0022: the dashboard's single actions in the audit. pgq.job_audit took the
-- bulk actions only (cancel, retry, delete); the dashboard now records its single cancels and
-- retries there too, and "run now" (a scheduled job made due at once), which needs its own action
-- name. No function changes.
ALTER TABLE pgq.job_audit DROP CONSTRAINT job_audit_action_check;
ALTER TABLE pgq.job_audit ADD CONSTRAINT job_audit_action_check
    CHECK (action IN ('cancel', 'retry', 'delete', 'run_now'));
COMMENT ON TABLE pgq.job_audit IS
    'Actions on jobs: one row per bulk batch (its own transaction) or per single action of the '
    'dashboard, with the jobs it changed. The jobs of a deleted batch are gone; their ids stay here.';
COMMENT ON COLUMN pgq.job_audit.action IS 'cancel, retry, delete or run_now (a scheduled job made due now).';
