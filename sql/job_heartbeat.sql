-- job_heartbeat: renew the leases of many running attempts in one statement (a worker sends one
-- per interval for all its jobs in flight), and store the progress their handlers reported since
-- the last one (`progress`: one JSON text per job, NULL to leave it; the whole array NULL when no
-- handler reported any). Fenced: only rows still running under the presented token are renewed; the
-- caller treats ids missing from the result as lost leases, and stops their handlers.
UPDATE pgq.jobs j
SET lease_expires_at = now() + make_interval(secs => h.lease_s),
    progress = coalesce(h.progress, j.progress)
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
            %(progress)b::text[]::jsonb[])
     AS h(id, token, lease_s, progress)
-- Matched by id and token only, never `status = 'running'`: see job_complete.sql.
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = h.id AND j.lease_token = h.token
RETURNING j.id, j.lease_expires_at
