-- Revision 0021 down: no scoped role sets, and the advisory locks of revision 0018 again.
-- Revision 0012's pgq.rescue, 0020's pgq.mark_awaited, 0016's pgq.enqueue_many, 0017's
-- pgq.enqueue_after, pgq.claim and pgq.settle, 0014's pgq.claim_group_heads and 0018's
-- pgq.enqueue_unique verbatim (same signatures but the walk's: grants stay); row security on
-- pgq.jobs and pgq.key_raises ends with every policy; pgq.lead, pgq.claim_key, pgq.caller_scope,
-- pgq.check_queues and the tables of 0021 go.

DO $policies$
DECLARE
    pol record;
BEGIN
    FOR pol IN SELECT p.policyname, p.tablename FROM pg_policies p
               WHERE p.schemaname = 'pgq' AND p.tablename IN ('jobs', 'key_raises') LOOP
        EXECUTE format('DROP POLICY %I ON pgq.%I', pol.policyname, pol.tablename);
    END LOOP;
END;
$policies$;
ALTER TABLE pgq.jobs DISABLE ROW LEVEL SECURITY;
ALTER TABLE pgq.key_raises DISABLE ROW LEVEL SECURITY;

-- pgq:function enqueue_many@previous

-- pgq:function enqueue_after@previous

-- pgq:function rescue@previous

-- pgq:function mark_awaited@previous

DROP FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[], text);
-- pgq:function claim_group_heads@previous
REVOKE EXECUTE ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]) FROM PUBLIC;

-- pgq:function claim@previous

-- pgq:function settle@previous

-- pgq:function enqueue_unique@previous

DROP FUNCTION pgq.lead(text);
DROP FUNCTION pgq.claim_key(text, bigint, integer, timestamptz);
DROP TABLE pgq.leaders;
DROP TABLE pgq.claim_secret;
DROP TABLE pgq.unique_locks;
DROP FUNCTION pgq.check_queues(text[], bigint[]);
DROP FUNCTION pgq.caller_scope();
DROP TABLE pgq.role_scopes;
