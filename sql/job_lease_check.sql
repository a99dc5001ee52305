-- job_lease_check: which of the given attempts no longer hold their lease, and whether because the
-- job was cancelled (`cancelled`: true) or for another reason (rescued, finished elsewhere, gone).
-- A read, no write: a worker without a LISTEN connection (behind PgBouncer in transaction mode)
-- asks it every poll interval, so that it learns of a cancellation within about a second instead of
-- at its next heartbeat (a third of the lease). Reads jobs_pkey only, through pgq.leases_lost
-- (revision 0020): no role but the admin may read pgq.jobs.lease_token itself.
SELECT l.id, l.cancelled
FROM pgq.leases_lost(%(ids)b::bigint[], %(tokens)b::uuid[]) AS l
