-- job_heartbeat: renew the leases of many running attempts in one statement (a worker sends one
-- per interval for all its jobs in flight). Fenced: only rows still running under the presented
-- token are renewed; the caller treats ids missing from the result as lost leases.
UPDATE pgq.jobs j
SET lease_expires_at = now() + make_interval(secs => h.lease_s)
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[])
     AS h(id, token, lease_s)
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = h.id AND j.lease_token = h.token
RETURNING j.id, j.lease_expires_at
