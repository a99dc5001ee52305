-- pgq schema, revision 0011: a worker changes a job only through its lease.
--
-- Until now pgq_worker held column-level UPDATE on pgq.jobs (and INSERT/UPDATE on
-- pgq.key_watermarks) so that its plain acknowledgement statements could run. Those grants let a
-- hostile worker write any row: fail another worker's (or a queued) job, which cancels its
-- dependents; mark another's job succeeded; set a waiting job to queued; write any watermark. The
-- worker's writes now live in SECURITY DEFINER functions that change a row only under the lease
-- token presented (the claim, pgq.claim, already was one), and the roles script revokes the direct
-- grants. Each function keeps the exact statement it replaces (sql/job_*.sql name them; the client
-- still sends one statement per batch):
--   pgq.complete, pgq.fail, pgq.heartbeat, pgq.snooze      the plain acknowledgements, one write per
--                                                           row; `lock_timeout` (NULL: wait) bounds
--                                                           their wait for a row lock another
--                                                           transaction holds;
--   pgq.complete_skip, pgq.fail_skip, pgq.heartbeat_skip,  the same, locking rows first in id order,
--   pgq.snooze_skip                                         SKIP LOCKED unless `wait`, reporting the
--                                                           held ones as busy;
--   pgq.rescue                                              the rescue of expired leases (no token:
--                                                           only rows whose lease has expired);
--   pgq.error_set                                           last_error of an attempt, under its token.
-- The lock_timeout guard: the plain acknowledgements set lock_timeout with set_config(..., true)
-- before their UPDATE, as the statements did in a CTE. The functions' own SET clause names only
-- search_path, so the setting is not undone when the function returns: it lasts to the end of the
-- caller's transaction, which for the worker's guarded call is the one statement (pgq/_ops/jobs.py
-- sends it in a transaction of its own). The wait starts inside the function, after the set, so a
-- held row still ends it with lock_not_available after that long. PL/pgSQL (not SQL) so that each
-- session plans each body once and reuses the plan, as it reused the prepared statements before.

-- The common part of every function below: a row changes only while it runs under the presented
-- token (CHECK jobs_lease_iff_running: a token is set exactly while the job runs), matched by
-- `id = ANY(ids)` so that jobs_pkey is the way in whatever the statistics say (see
-- sql/job_complete.sql), and the rows of a batch are locked in id order.

-- pgq:function complete

-- pgq:function complete_skip

-- pgq:function fail

-- pgq:function fail_skip

-- pgq:function heartbeat

-- pgq:function heartbeat_skip

-- pgq:function snooze

-- pgq:function snooze_skip

-- pgq:function rescue

-- pgq:function error_set

REVOKE EXECUTE ON FUNCTION
    pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean),
    pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.rescue(integer),
    pgq.error_set(bigint, uuid, text)
FROM PUBLIC;
