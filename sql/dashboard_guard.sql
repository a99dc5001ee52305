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
SELECT set_config('statement_timeout', %(statement_timeout)s, true) AS statement_timeout,
       set_config('idle_in_transaction_session_timeout', %(idle_limit)s, true) AS idle_limit,
       set_config('jit', 'off', true) AS jit,
       set_config('max_parallel_workers_per_gather', '0', true) AS parallel,
       now() AS now
