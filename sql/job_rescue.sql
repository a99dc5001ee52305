-- job_rescue: take back up to `limit` attempts whose lease expired (their worker died or hung).
-- The expired attempt counts as failed: a job with attempts left is queued again at once, one that
-- used its last attempt is failed (freeing its dedupe key). Clearing the lease token fences out the
-- old worker should it come back. SKIP LOCKED: a row some transaction holds is left for the next
-- round instead of blocking the rescue of all the others.
WITH expired AS (
    SELECT j.id
    FROM pgq.jobs j
    WHERE j.status = 'running' AND j.lease_expires_at < now()
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE pgq.jobs j
    SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
        run_at = now(),
        last_error = 'lease expired at ' || j.lease_expires_at::text
                     || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.status, j.queue, j.kind
),
wake AS (
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
    FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
)
SELECT r.id, r.status::text AS status, r.queue, r.kind, (SELECT w.n FROM wake w) AS woke
FROM rescued r
