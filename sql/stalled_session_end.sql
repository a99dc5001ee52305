-- stalled_session_end: step 2 of a maintenance run, after maintenance_lock took the rescue lock. Ends
-- the sessions that have been stuck for `after_s` seconds sending the result of one of pgq's writing
-- statements (named in `statements` by the first word of their .sql file's opening comment) to a
-- client that stopped reading: a paused or frozen worker process, a suspended VM.
--
-- Why this is needed: a statement's row locks last until its transaction commits, and a statement
-- run as its own transaction commits only after its whole result has gone out. A claim whose
-- result is bigger than the socket buffers (hundreds of jobs, or big payloads) therefore keeps its
-- jobs locked for as long as its client is frozen: still `queued`, yet skipped by every other
-- worker's SKIP LOCKED, and no lease covers them because the claim never committed. Neither
-- statement_timeout (a cancel is not served while a result is being written) nor TCP keepalives
-- (the frozen host's kernel answers them) ever ends such a session. Ending it rolls the statement
-- back: the jobs are free at once, and the client, should it wake up, gets a connection error
-- and claims again. `after_s` is half the rescuing worker's lease, not more: a stuck claim may also
-- hold rows of other workers' running jobs (see transaction_guard.sql), whose acknowledgements and
-- heartbeats wait for it.
--
-- Only sessions this role may signal without an error: its own role's or those of roles whose
-- privileges it has (or all with pg_signal_backend), never a superuser's unless it is one; and only
-- in this database. Sessions of other roles are invisible to the filter on `query` anyway unless
-- this role may read all statistics.
SELECT a.pid,
       coalesce(a.application_name, '') AS application_name,
       coalesce(host(a.client_addr), 'local') AS client,
       s.statement,
       extract(epoch FROM now() - a.query_start)::float8 AS stalled_s,
       pg_terminate_backend(a.pid) AS ended
FROM pg_stat_activity a
JOIN pg_roles r ON r.oid = a.usesysid
-- The statement's name, from its file's opening comment (pgq sends the files as they are).
CROSS JOIN LATERAL (SELECT substring(a.query FROM '^-- ([a-z_]+):') AS statement) s
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND a.state = 'active'
  AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientWrite'
  AND a.query_start < now() - make_interval(secs => %(after_s)s)
  AND s.statement = ANY(%(statements)s::text[])
  AND (pg_has_role(a.usesysid, 'USAGE') OR pg_has_role('pg_signal_backend', 'USAGE'))
  AND (NOT r.rolsuper OR (SELECT c.rolsuper FROM pg_roles c WHERE c.rolname = current_user))
ORDER BY a.query_start
