-- A scoped role set (`pgq roles --prefix P --queues q1,q2`): {producer} and {worker} get what the
-- roles of pgq_roles.sql get, boxed in their queues (revision 0021). No admin role: pgq's
-- objects stay with the unscoped set's admin (or whoever owns them). Several scoped sets live side
-- by side with the unscoped one. Idempotent; `pgq migrate` re-runs it for every set of
-- pgq.role_scopes.
--   {producer}  enqueues (replace, debounce, sequence keys, dependencies) in its queues only, and
--               reads only their jobs (row security on pgq.jobs), none of the views (they would
--               show every queue) and only the small tables a client reads (limits, pauses).
--   {worker}    claims and rescues in its queues only (its own maintenance leaders), and sets no
--               limit: limits are per kind, across every queue.

-- 1. The roles, created only when missing; an existing role is left as it is.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {producer_name}) THEN
        CREATE ROLE {producer} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {worker_name}) THEN
        CREATE ROLE {worker} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT;
    END IF;
END
$roles$;

-- 2. Its queues: the row every pgq function checks a scoped session against, and the maintenance
-- leaders of its workers (they rescue and enqueue ticks in its queues only).
INSERT INTO pgq.role_scopes (prefix, producer, worker, queues)
VALUES ({prefix_name}, {producer_name}, {worker_name}, {queues})
ON CONFLICT (prefix) DO UPDATE SET producer = EXCLUDED.producer, worker = EXCLUDED.worker, queues = EXCLUDED.queues;
INSERT INTO pgq.leaders (step) VALUES ('rescue:' || {prefix_name}), ('periodic:' || {prefix_name})
ON CONFLICT DO NOTHING;
-- Its rows of pgq.jobs (and of pgq.key_raises, which a job's read shows): those of its queues, for
-- reading and inserting (restrictive policies, which narrow what every other policy lets its members
-- see).
DROP POLICY IF EXISTS {policy} ON pgq.jobs;
CREATE POLICY {policy} ON pgq.jobs AS RESTRICTIVE TO {producer}
    USING (queue = ANY({queues})) WITH CHECK (queue = ANY({queues}));
DROP POLICY IF EXISTS {policy} ON pgq.key_raises;
CREATE POLICY {policy} ON pgq.key_raises AS RESTRICTIVE TO {producer} USING (queue = ANY({queues}));

-- 3. The unscoped roles' grants (pgq_roles.sql from its step 3 on) follow, then step 4 below.
