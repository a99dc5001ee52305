-- dashboard_guard: the first statement of each read the dashboard runs (pgq.web.queries), in the
-- transaction of that read. SET LOCAL semantics (is_local = true): the settings end with the
-- transaction, so a pooled session keeps its own.
--
-- statement_timeout = `statement_timeout`: every dashboard query is built to read a bounded slice of
-- pgq.jobs through an index (see the files it runs), so one that takes longer met something else, a
-- lock or a server under strain; a page that fails is better than a dashboard adding load to that.
-- idle_in_transaction_session_timeout and jit = off for the reasons transaction_guard.sql gives: the
-- statements follow each other within milliseconds, and the planner's estimates for counts over big
-- ranges reach the thresholds at which JIT compiles a statement for tens of milliseconds.
-- max_parallel_workers_per_gather = 0: a dashboard refreshing every few seconds should take one core
-- of the database server, not several; and the counts of a 100,000-job backlog measured no faster in
-- parallel (about 24 ms either way), while starting the workers made them slower and less even on a
-- busy server.
--
-- Returns the database clock: every age, "in 3 min" and chart bucket the dashboard shows is computed
-- from it, never from the web server's clock. now() is the transaction's start, the same for every
-- statement of the read.
--
-- And, in the same round trip (each statement of a read is one; on a busy 2-core server each costs
-- a few ms of waiting for the server's process to be scheduled, issue #44), what most reads need:
-- - what the dashboard's database role may do, so that it shows only the buttons that can work and
--   refuses the rest with the reason. Cancelling and retrying need DELETE on pgq.jobs, the privilege
--   the trigger of revision 0002 (jobs_guard_admin_transition) checks; pausing and resuming insert
--   into and delete from pgq.paused_queues (pgq.pause, pgq.resume). pgq_admin (and the owner, and
--   superusers) have all of them; pgq_worker and pgq_producer none.
-- - how far pgq.finished_counts goes (revision 0026): its minutes before counted_through are counted
--   (NULL: none yet), by the pass that ended at counted_at, which counted again the last `recount`
--   before its previous end. pgq.finished_counts_state has one row.
SELECT set_config('statement_timeout', %(statement_timeout)s, true) AS statement_timeout,
       set_config('idle_in_transaction_session_timeout', %(idle_limit)s, true) AS idle_limit,
       set_config('jit', 'off', true) AS jit,
       set_config('max_parallel_workers_per_gather', '0', true) AS parallel,
       now() AS now,
       current_user AS role,
       has_table_privilege('pgq.jobs', 'DELETE') AS can_change_jobs,
       has_table_privilege('pgq.paused_queues', 'INSERT')
           AND has_table_privilege('pgq.paused_queues', 'DELETE') AS can_pause,
       s.counted_through,
       s.counted_at,
       extract(epoch FROM s.recount)::double precision AS recount_s
FROM (SELECT 1) AS one
LEFT JOIN pgq.finished_counts_state s ON true
