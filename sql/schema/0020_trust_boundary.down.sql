-- Revision 0020 down: revision 0018's functions and tables, without 0020's functions and checks.

-- 1. Lease tokens.
DROP FUNCTION pgq.leases_lost(bigint[], uuid[]);
-- pgq:function mark_awaited@previous

-- 2. Bounded times (the rows brought inside the bounds stay as they are).
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_run_at_bounded, DROP CONSTRAINT jobs_lease_bounded;
ALTER TABLE pgq.workers
    DROP CONSTRAINT workers_lease_s_bounded,
    DROP CONSTRAINT workers_refresh_s_bounded,
    ADD CONSTRAINT workers_lease_s_check CHECK (lease_s > 0),
    ADD CONSTRAINT workers_refresh_s_check CHECK (refresh_s > 0);

-- 3. Limits through functions (the roles script of revision 0018 grants the direct writes again).
DROP FUNCTION pgq.concurrency_limit_set(text, integer);
DROP FUNCTION pgq.rate_limit_set(text, integer, double precision);
DROP FUNCTION pgq.group_limits_set(text, integer, integer, double precision);

-- 4. Sequence tails are no longer pruned (those pruned stay gone: the next enqueue starts anew).
DROP TRIGGER jobs_sequence_tail_prune_trg ON pgq.jobs;
DROP FUNCTION pgq.sequence_tail_prune();
