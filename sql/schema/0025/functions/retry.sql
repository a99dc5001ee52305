CREATE OR REPLACE FUNCTION pgq.retry(job_id bigint, actor text DEFAULT NULL) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
-- Revision 0025: sql/job_retry.sql as a function, so that a retry in SQL is audited too. PL/pgSQL,
-- whose body is not analysed at creation: it names the enum value 'waiting', which may be new in the
-- migrating transaction (revision 0007 adds it). Parameters are qualified (retry.job_id): a column
-- of pgq.job_dependencies has the same name.
RETURN QUERY
WITH parents AS MATERIALIZED (
    -- The job's parents, share-locked in id order before the job itself (parents are older than
    -- their children: one global order). A parent finishing concurrently either committed first, and
    -- the locked row is its latest version, finished; or its UPDATE waits for this transaction, and
    -- its release trigger then finds the job waiting with the edge open.
    SELECT p.id, p.status
    FROM pgq.jobs p
    WHERE p.id IN (SELECT d.parent_id FROM pgq.job_dependencies d WHERE d.job_id = retry.job_id)
    ORDER BY p.id
    FOR SHARE OF p
),
unfinished AS (
    SELECT count(*) FILTER (WHERE p.status IN ('waiting', 'queued', 'running'))::integer AS n FROM parents p
),
retried AS (
    UPDATE pgq.jobs j
    SET status = CASE WHEN u.n > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
        pending_parents = CASE WHEN j.pending_parents IS NOT NULL THEN u.n END,
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        result = NULL
    FROM unfinished u
    WHERE j.id = retry.job_id AND j.status IN ('failed', 'cancelled')
    RETURNING j.*
),
reopened AS (
    -- Its edges: open (no outcome) for the parents it waits for, so that their release trigger counts
    -- them off; the outcome as it is now for the others (a retried parent may have succeeded since).
    UPDATE pgq.job_dependencies d
    SET parent_outcome = CASE WHEN p.status IN ('succeeded', 'failed', 'cancelled') THEN p.status END
    FROM parents p, retried r
    WHERE d.job_id = r.id AND d.parent_id = p.id
      AND d.parent_outcome IS DISTINCT FROM
          CASE WHEN p.status IN ('succeeded', 'failed', 'cancelled') THEN p.status END
),
wake AS (
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(r.queue) <= 1000 THEN r.queue ELSE '*' END)) AS n
    FROM retried r
    WHERE r.status = 'queued'
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, job_ids)
    SELECT 'retry', nullif(retry.actor, ''), ARRAY[r.id] FROM retried r
)
SELECT r.* FROM retried r
WHERE (SELECT w.n FROM wake w) IS NOT NULL;  -- evaluates the wake
END;
$fn$;

COMMENT ON FUNCTION pgq.retry(bigint, text) IS
    'Give a failed or cancelled job a new series of attempts, due now (a job with parents waits for '
    'those not finished); wakes its queue''s workers. Returns the job if retried, and then records it in '
    'pgq.job_audit: `actor` as who asked (NULL: not named), the session''s role as db_role. Fails with a '
    'unique violation when another active job holds its dedupe key. Needs an administrator.';
