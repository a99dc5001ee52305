-- maintenance_lock: step 1 of every maintenance run (rescue, periodic enqueue, retention), in the
-- run's own transaction. Whoever gets the lock is the leader for this run; the others skip it.
-- The lock is the row lock of the step's row of pgq.leaders (pgq.lead, revision 0021: no role
-- without pgq's rights can take it, as anyone could take an advisory lock). It lasts the
-- transaction: released by the commit, so it works through PgBouncer in transaction mode, and a
-- worker that dies mid-run cannot keep it.
-- A worker that hangs mid-run instead (a paused process, an event loop blocked by a CPU-bound
-- handler) would keep it, and with it stop every other worker's rescue for as long as it hangs, the
-- very case rescue exists for. So the run's transaction may sit idle at most `idle_limit` (its
-- statements follow each other within milliseconds): past that the server ends the hung worker's
-- session, which releases the lock; the worker sees a connection error and tries again later. This
-- statement stands in for transaction_guard.sql, saving a round trip, so it applies the same settings
-- (that file says why each): that idle limit, and no JIT compilation. SET LOCAL semantics
-- (is_local = true): the settings end with the transaction and never leak into a pooled session.
-- Also returns the database clock, which the periodic step reads its ticks from.
SELECT pgq.lead(%(key)s::text) AS leader, now() AS now,
       set_config('idle_in_transaction_session_timeout', %(idle_limit)s, true) AS idle_limit,
       set_config('jit', 'off', true) AS jit
