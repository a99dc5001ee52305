-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: layout H's indexes on A's live
-- table (a.sql). H is A with a claim that can be a HOT update (no new index entry, a WAL record of
-- the changed bytes only): no index names a column the claim or a heartbeat changes (status,
-- attempts, the lease, claimed_by, started_at), and the table's fillfactor leaves each row room for
-- its claimed version. What that costs:
-- - claimed (running) rows stay in the claim index until acknowledged: every claim passes over the
--   rows in flight at the head of its queue (one heap visit each);
-- - rescue has no lease index: it reads the live table (the backlog) at each of its runs. From
--   PostgreSQL 16 on, a BRIN index on lease_expires_at would serve it without breaking HOT (BRIN
--   indexes no longer count against it); the prototype runs on 15;
-- - counts per status (running jobs per kind and group) read heap rows instead of partial indexes.
-- Waiting jobs (pending_parents > 0) are left out of the claim index by a column the claim does not
-- change.

CREATE INDEX jobs_claim_idx ON @schema@.jobs (queue, kind, priority, run_at, id) WHERE pending_parents IS NULL;
-- A key's active job: every live row but waiting ones.
CREATE UNIQUE INDEX jobs_dedupe_active_uq ON @schema@.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND pending_parents IS NULL;
CREATE INDEX jobs_claim_group_idx ON @schema@.jobs (queue, kind, group_key, priority, run_at, id)
    WHERE limited AND pending_parents IS NULL;
CREATE INDEX jobs_waiting_idx ON @schema@.jobs (queue) WHERE pending_parents IS NOT NULL;
CREATE INDEX jobs_retrying_idx ON @schema@.jobs (queue) WHERE last_error IS NOT NULL;
