-- maintenance_lock: step 1 of every maintenance run (rescue, periodic enqueue, retention), in the
-- run's own transaction. Whoever gets the lock is the leader for this run; the others skip it.
-- A transaction-level lock (never a session lock): it is released by the commit, so it works through
-- PgBouncer in transaction mode, and a worker that dies mid-run cannot keep it.
-- Also returns the database clock, which the periodic step reads its ticks from.
SELECT pg_try_advisory_xact_lock(%(key)s::bigint) AS leader, now() AS now
