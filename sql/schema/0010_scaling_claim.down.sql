-- Reverts revision 0010: the claim is the two query files again (job_claim_fast, claim_limits_lock +
-- job_claim, restored by the code of that revision), limits mark no jobs, enqueues count from now(),
-- keyed batches insert in input order.
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
DROP FUNCTION pgq.limits_changed(text);
DROP INDEX pgq.jobs_claim_limited_idx;
DROP INDEX pgq.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON pgq.jobs (queue, priority, run_at, id) WHERE status = 'queued';
ALTER TABLE pgq.jobs ALTER COLUMN run_at SET DEFAULT now();

-- Revision 0005's pgq.enqueue_many and revision 0008's pgq.enqueue_after, as they were.
-- pgq:function enqueue_many@previous


-- pgq:function enqueue_after@previous



ALTER TABLE pgq.jobs DROP COLUMN limited;
