-- maintenance_lock_seen: maintenance_lock.sql (read it: the lock, the clock and the transaction's
-- settings are the same) that also refreshes the worker's registry row (pgq.worker_seen), so that
-- a registered worker keeps its row fresh with the maintenance run it does anyway, with no round
-- trip of its own. `seen` is false when the row was pruned meanwhile: the worker registers again.
SELECT pgq.lead(%(key)s::text) AS leader, now() AS now,
       set_config('idle_in_transaction_session_timeout', %(idle_limit)s, true) AS idle_limit,
       set_config('jit', 'off', true) AS jit,
       pgq.worker_seen(%(id)s::uuid, %(token)s::uuid, %(state)s::text) AS seen
