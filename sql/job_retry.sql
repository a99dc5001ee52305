-- job_retry: give a failed or cancelled job a new series of attempts, due now. Fails with a unique
-- violation on jobs_dedupe_active_uq if another active job holds its dedupe key meanwhile.
--
-- A job with parents (pending_parents not NULL) recounts them: it is `waiting` for those that have
-- not finished, `queued` when none is left. A parent that finished counts as done whatever its
-- outcome (retrying the child overrides the parent that cancelled it); one that is waiting, queued
-- or running (perhaps retried itself) is waited for, and its outcome applies to the job when it
-- finishes, as to any waiting job. Plain jobs find no edges and are queued.
--
-- A retry is recorded in pgq.job_audit with `actor` (NULL: not named) and the role (db_role's default).
WITH parents AS MATERIALIZED (
    -- The job's parents, share-locked in id order before the job itself (parents are older than
    -- their children: one global order). A parent finishing concurrently either committed first, and
    -- the locked row is its latest version, finished; or its UPDATE waits for this transaction, and
    -- its release trigger then finds the job waiting with the edge open.
    SELECT p.id, p.status
    FROM pgq.jobs p
    WHERE p.id IN (SELECT d.parent_id FROM pgq.job_dependencies d WHERE d.job_id = %(id)s)
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
    WHERE j.id = %(id)s AND j.status IN ('failed', 'cancelled')
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
    SELECT 'retry', %(actor)s::text, ARRAY[r.id] FROM retried r
)
SELECT r.*, (SELECT w.n FROM wake w) AS woke
FROM retried r
