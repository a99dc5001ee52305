-- job_heartbeat: renew the leases of many running attempts in one statement (a worker sends one
-- per interval for all its jobs in flight), and store the progress their handlers reported since
-- the last one (`progress`: one JSON text per job, NULL to leave it; the whole array NULL when no
-- handler reported any). Fenced: only rows still running under the presented token are renewed; the
-- caller treats ids missing from the result as lost leases, and stops their handlers.
-- `lock_timeout`: the worker's own acknowledgements (each its own transaction) wait at most this
-- long for a row lock that another transaction holds (a producer's, an operator's), then fail with
-- lock_not_available and are sent again through job_heartbeat_skip.sql, which skips held rows; NULL: wait as
-- long as it takes (a caller's own use). Set for this statement's transaction only.
WITH guard AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s::text, true) AS was_set
    WHERE %(lock_timeout)s::text IS NOT NULL
)
UPDATE pgq.jobs j
SET lease_expires_at = now() + make_interval(secs => h.lease_s),
    progress = coalesce(h.progress, j.progress)
FROM (SELECT u.* FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
                          %(progress)b::text[]::jsonb[]) AS u(id, token, lease_s, progress)
      -- In id order: with jobs_pkey's scan (which also visits `ids` in order), every plan then locks
      -- the rows in id order, the one order of every statement that locks several jobs.
      ORDER BY u.id) h
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = h.id AND j.lease_token = h.token
  AND (SELECT count(*) FROM guard) >= 0
RETURNING j.id, j.lease_expires_at
