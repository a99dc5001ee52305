-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: layout A's indexes on its live
-- table (a.sql).

-- What every job pays: the primary key, one claim index (revision 0027's kind index, now the only
-- one: a claim of several kinds reads it per kind and merges) and, while it runs, the lease index.
CREATE INDEX jobs_claim_idx ON @schema@.jobs (queue, kind, priority, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_lease_idx ON @schema@.jobs (lease_expires_at) WHERE status = 'running';
-- What only some jobs pay: keyed, grouped, dependent and retried ones.
CREATE UNIQUE INDEX jobs_dedupe_active_uq ON @schema@.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX jobs_claim_group_idx ON @schema@.jobs (queue, kind, group_key, priority, run_at, id)
    WHERE status = 'queued' AND limited;
CREATE INDEX jobs_running_group_idx ON @schema@.jobs (kind, group_key) WHERE status = 'running' AND group_key IS NOT NULL;
CREATE INDEX jobs_waiting_idx ON @schema@.jobs (queue) WHERE status = 'waiting';
CREATE INDEX jobs_retrying_idx ON @schema@.jobs (queue) WHERE status = 'queued' AND last_error IS NOT NULL;

