-- pgq schema, revision 0021: trust boundaries between services (issue 40): services boxed in their
-- queues (finding 3, the first part below), and nothing squattable (finding 4, and finding 8's
-- unique slots).
--
-- Up to revision 0018 every lock pgq's liveness depended on was an advisory lock with a fixed key:
-- the leaders of rescue, periodic enqueue and retention, the settle, 256 slots of
-- pgq.enqueue_unique, and the claim's reservations (1885827427, id % 2^31). Any role that can
-- connect may take any advisory lock, and pg_locks shows every held key to every role: an idle
-- session of a role without pgq's rights stopped maintenance, blocked unique enqueues and hid jobs
-- from every claim; an application using the same keys by chance did the same.
--
--   * Leaders (rescue, periodic, retention, settle) hold the row lock of their row of the new table
--     pgq.leaders (FOR UPDATE SKIP LOCKED, released by the commit like the advisory lock was).
--     Locking a row needs UPDATE on its table: only pgq.lead() (SECURITY DEFINER, granted to the
--     worker role) and pgq.settle take them.
--   * pgq.enqueue_unique serializes the producers of one (queue, key) with the row lock of the
--     key's row of the new table pgq.unique_locks (an upsert, keys in one global order), held to the
--     producer's commit: per key, as documented, where 256 shared slots made an open producer
--     transaction block unrelated keys. Row locks take no entry of PostgreSQL's shared lock table,
--     whatever the batch. pgq.settle deletes rows of keys unused for an hour.
--   * The claim keeps its advisory reservations (they keep concurrent claims off each other's
--     candidates without writing rows), under keys no outsider can know ahead: a 64-bit md5 of a
--     per-database secret (pgq.claim_secret, readable by the owner only), the minute, and the job's
--     id, attempts and run_at (pgq.claim_key). A key seen in pg_locks is that of a job a claim takes
--     at once; taking it later hides nothing: the job's next stay in queued has another attempt
--     count or run_at, and the minute changes the key of every job. Two claims that compute
--     different keys for one row (a minute boundary) both reserve it; the take, which locks rows
--     FOR NO KEY UPDATE SKIP LOCKED and checks them queued, gives it to one, as it always did for
--     a row reserved from an older snapshot. 64-bit keys also end the sharing of keys by ids
--     2^31 apart, and an application's two-int advisory locks are a different key space.
--
-- Same signatures for pgq.claim, pgq.settle, pgq.enqueue_unique, pgq.rescue and pgq.mark_awaited
-- (their grants stay); pgq.claim_group_heads gains the salt argument (internal, granted to no role).

-- Services boxed in their queues (issue 40, finding 3). A scoped role set (`pgq roles --prefix P
-- --queues q1,q2`) is a row of pgq.role_scopes: its producer role (which its worker role is a member
-- of) and its queues. A session is scoped when its login (session_user: SET ROLE does not change it,
-- and inside pgq's SECURITY DEFINER functions current_user is pgq's owner) is a member of a scoped
-- producer role and not of pgq's owner; several sets: the queues they all have. Its producer
-- enqueues (replaces, debounces, sequences, depends) in those queues only, reads only their jobs
-- (row security on pgq.jobs: a restrictive policy per set, which the roles script creates), and its
-- worker claims and rescues only there. With no scoped set, each check is one probe of an empty
-- table.
CREATE TABLE pgq.role_scopes (
    prefix   text PRIMARY KEY,
    producer text NOT NULL UNIQUE,
    worker   text NOT NULL UNIQUE,
    queues   text[] NOT NULL CHECK (cardinality(queues) > 0 AND array_position(queues, NULL) IS NULL)
);
COMMENT ON TABLE pgq.role_scopes IS
    'The scoped role sets (revision 0021): the sessions of members of `producer` (its worker role is one) enqueue, '
    'read, claim and rescue in `queues` only. Written by the roles script (`pgq roles --queues`).';
COMMENT ON COLUMN pgq.role_scopes.prefix IS 'The set''s prefix: its roles are <prefix>producer and <prefix>worker.';
COMMENT ON COLUMN pgq.role_scopes.producer IS 'Name of the set''s producer role.';
COMMENT ON COLUMN pgq.role_scopes.worker IS 'Name of the set''s worker role.';
COMMENT ON COLUMN pgq.role_scopes.queues IS 'The queues the set may use.';

-- pgq:function caller_scope
REVOKE EXECUTE ON FUNCTION pgq.caller_scope() FROM PUBLIC;

-- pgq:function check_queues
REVOKE EXECUTE ON FUNCTION pgq.check_queues(text[], bigint[]) FROM PUBLIC;

-- Reads: row security on pgq.jobs (and pgq.key_raises). Every role keeps every row it may read or insert (the policy
-- below, for everyone); a scoped set's restrictive policy (`pgq roles --queues`) narrows its members
-- to its queues. pgq's owner and superusers bypass row security, and so does every SECURITY DEFINER
-- function of pgq (they run as the owner, and check the scope themselves). The views run with their
-- owner's rights too: a scoped set is granted none of them.
ALTER TABLE pgq.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_every_row ON pgq.jobs USING (true) WITH CHECK (true);
-- Likewise the pending raises a job's read shows (Queue.get): their keys are the queue's.
ALTER TABLE pgq.key_raises ENABLE ROW LEVEL SECURITY;
CREATE POLICY key_raises_every_row ON pgq.key_raises USING (true) WITH CHECK (true);

-- The producers' SECURITY DEFINER entry points check the queues first: revision 0016's
-- pgq.enqueue_many and 0017's pgq.enqueue_after with the check (same signatures: grants stay).
-- pgq:function enqueue_many

-- pgq:function enqueue_after

-- Revision 0020's mark_awaited, for jobs of the session's queues only (it returns the job's row,
-- without its lease token).
-- pgq:function mark_awaited

-- Revision 0012's rescue, of the expired leases of the session's queues only.
-- pgq:function rescue

CREATE TABLE pgq.leaders (
    step text PRIMARY KEY CHECK (step ~ '^(rescue|periodic|retention|settle)(:.+)?$')
);
COMMENT ON TABLE pgq.leaders IS
    'One row per maintenance step (revision 0021): a run of the step holds its row lock (pgq.lead, '
    'pgq.settle), so that one worker at a time runs it. Rows are never changed.';
COMMENT ON COLUMN pgq.leaders.step IS
    'The step: rescue, periodic, retention or settle; ''<step>:<prefix>'' for the workers of a scoped role set '
    '(pgq.role_scopes), which rescue and enqueue ticks in their queues only.';
INSERT INTO pgq.leaders (step) VALUES ('rescue'), ('periodic'), ('retention'), ('settle');

-- pgq:function lead
REVOKE EXECUTE ON FUNCTION pgq.lead(text) FROM PUBLIC;

CREATE TABLE pgq.claim_secret (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret text NOT NULL DEFAULT (gen_random_uuid()::text || gen_random_uuid()::text)
);
COMMENT ON TABLE pgq.claim_secret IS
    'The per-database secret the claim''s reservation keys derive from (pgq.claim_key; revision 0021). '
    'Readable by pgq''s owner only: the roles script grants it to no role.';
COMMENT ON COLUMN pgq.claim_secret.one IS 'Always true: the table has one row.';
COMMENT ON COLUMN pgq.claim_secret.secret IS 'Random text (two random UUIDs).';
INSERT INTO pgq.claim_secret DEFAULT VALUES;

-- Inlined into the claim's scans (a plain SQL expression function). STABLE: extract() of a
-- timestamptz is; the epoch itself does not depend on the session's time zone.
-- pgq:function claim_key
REVOKE EXECUTE ON FUNCTION pgq.claim_key(text, bigint, integer, timestamptz) FROM PUBLIC;

CREATE TABLE pgq.unique_locks (
    queue      text NOT NULL,
    dedupe_key text NOT NULL,
    used_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (queue, dedupe_key)
);
COMMENT ON TABLE pgq.unique_locks IS
    'One row per (queue, dedupe key) that pgq.enqueue_unique used lately: its row lock serializes the key''s '
    'producers (revision 0021). pgq.settle deletes rows unused for an hour.';
COMMENT ON COLUMN pgq.unique_locks.queue IS 'Queue of the key.';
COMMENT ON COLUMN pgq.unique_locks.dedupe_key IS 'The dedupe key.';
COMMENT ON COLUMN pgq.unique_locks.used_at IS 'When a producer last locked the row.';
CREATE INDEX unique_locks_used_idx ON pgq.unique_locks (used_at);

-- The walk's group heads, reserved under pgq.claim_key (the claim passes its salt): revision 0014's
-- body otherwise.
DROP FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]);
-- pgq:function claim_group_heads
REVOKE EXECUTE ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[], text) FROM PUBLIC;

-- Revision 0017's claim, reserving under pgq.claim_key (same signature: its grants stay).
-- pgq:function claim

-- Revision 0017's settle under the settle row's lock, and the pruning of pgq.unique_locks.
-- pgq:function settle

-- Revision 0018's pgq.enqueue_unique, with a row lock per key instead of 256 advisory slots.
-- pgq:function enqueue_unique
