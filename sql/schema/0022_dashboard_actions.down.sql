-- Revision 0022 down: the audit takes the bulk actions' names only again. Rows recording a run-now
-- are deleted first (the older check refuses them); the other rows stay.
DELETE FROM pgq.job_audit WHERE action = 'run_now';
ALTER TABLE pgq.job_audit DROP CONSTRAINT job_audit_action_check;
ALTER TABLE pgq.job_audit ADD CONSTRAINT job_audit_action_check CHECK (action IN ('cancel', 'retry', 'delete'));
COMMENT ON TABLE pgq.job_audit IS
    'Bulk actions on jobs: one row per batch (its own transaction), with the jobs it changed. The jobs of '
    'a deleted batch are gone; their ids stay here.';
COMMENT ON COLUMN pgq.job_audit.action IS 'cancel, retry or delete.';
