-- job_retry: give a failed or cancelled job a new series of attempts, due now. Fails with a unique
-- violation on jobs_dedupe_active_uq if another active job holds its dedupe key meanwhile.
WITH retried AS (
    UPDATE pgq.jobs j
    SET status = 'queued',
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        result = NULL
    WHERE j.id = %(id)s AND j.status IN ('failed', 'cancelled')
    RETURNING j.*
),
wake AS (
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(r.queue) <= 1000 THEN r.queue ELSE '*' END)) AS n
    FROM retried r
)
SELECT r.*, (SELECT w.n FROM wake w) AS woke
FROM retried r
