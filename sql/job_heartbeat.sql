-- job_heartbeat: renew the leases of many running attempts in one statement (a worker sends one
-- per interval for all its jobs in flight), and store the progress their handlers reported since
-- the last one (`progress`: one JSON text per job, NULL to leave it; the whole array NULL when no
-- handler reported any). pgq.heartbeat, revision 0011. Fenced: only rows still running under the
-- presented token are renewed; the caller treats ids missing from the result as lost leases, and
-- stops their handlers. `lock_timeout`: as in job_complete (sent again through job_heartbeat_skip.sql).
SELECT h.id, h.lease_expires_at
FROM pgq.heartbeat(%(ids)b::bigint[], %(tokens)b::uuid[], %(lease_s)b::double precision[],
                   %(progress)b::text[]::jsonb[], %(lock_timeout)s::text) h
