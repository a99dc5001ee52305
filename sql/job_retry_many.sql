-- job_retry_many: job_retry.sql (read it) for the failed or cancelled jobs among `ids`, one batch of a
-- bulk retry, in one statement. What differs:
--   - a job whose dedupe key an active job holds is skipped, and of several jobs of the batch with the
--     same key only the newest is retried (job_retry fails with a unique violation instead);
--   - a parent retried in the same batch is waited for, as it is queued (or waiting) again.
-- Parents are share-locked in id order, then the jobs locked in id order. One pgq.job_audit row lists
-- the jobs retried. Returns how many.
WITH parents AS MATERIALIZED (
    SELECT p.id, p.status
    FROM pgq.jobs p
    WHERE p.id IN (SELECT d.parent_id FROM pgq.job_dependencies d WHERE d.job_id = ANY(%(ids)s::bigint[]))
    ORDER BY p.id
    FOR SHARE OF p
),
targets AS MATERIALIZED (
    SELECT j.id, j.queue, j.dedupe_key
    FROM pgq.jobs j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('failed', 'cancelled')
    ORDER BY j.id
    FOR UPDATE OF j  -- the delete's own lock, in id order (a delete, unlike an update, waits for a
                     -- producer's FOR KEY SHARE of a parent: no upgrade in another order later)
),
chosen AS MATERIALIZED (
    SELECT t.id FROM targets t WHERE t.dedupe_key IS NULL
    UNION ALL
    (SELECT DISTINCT ON (t.queue, t.dedupe_key) t.id
     FROM targets t
     WHERE t.dedupe_key IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgq.jobs o
                       WHERE o.queue = t.queue AND o.dedupe_key = t.dedupe_key AND o.status IN ('queued', 'running'))
     ORDER BY t.queue, t.dedupe_key, t.id DESC)
),
unfinished AS (
    SELECT d.job_id,
           count(*) FILTER (WHERE p.status IN ('waiting', 'queued', 'running')
                               OR p.id IN (SELECT c.id FROM chosen c))::integer AS n
    FROM pgq.job_dependencies d
    JOIN parents p ON p.id = d.parent_id
    WHERE d.job_id IN (SELECT c.id FROM chosen c)
    GROUP BY d.job_id
),
gone AS (
    -- Revision 0033: the jobs move from pgq.finished_jobs back to pgq.live_jobs, a delete and an
    -- insert in this statement (the same ids).
    DELETE FROM pgq.finished_jobs j
    USING chosen c
    WHERE j.id = c.id
    RETURNING j.*
),
retried AS (
    INSERT INTO pgq.live_jobs AS j (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts,
                                    dedupe_key, lease_token, lease_expires_at, claimed_by, last_error, result,
                                    input_watermark, done_watermark, created_at, started_at, finished_at,
                                    progress, awaited, pending_parents, has_dependents, limited, group_key,
                                    trace_context, sequence_key)
    SELECT g.id, g.queue, g.kind, g.payload, g.priority,
           CASE WHEN coalesce(u.n, 0) > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status, now(), 0,
           g.max_attempts, g.dedupe_key, NULL, NULL, g.claimed_by, g.last_error, NULL,
           g.input_watermark, g.done_watermark, g.created_at, g.started_at, NULL,
           g.progress, g.awaited, CASE WHEN g.pending_parents IS NOT NULL THEN coalesce(u.n, 0) END,
           g.has_dependents, g.limited, g.group_key, g.trace_context, g.sequence_key
    FROM gone g
    LEFT JOIN unfinished u ON u.job_id = g.id
    ORDER BY g.id
    RETURNING j.id, j.queue, j.status
),
reopened AS (
    UPDATE pgq.job_dependencies d
    SET parent_outcome = CASE WHEN p.id IN (SELECT c.id FROM chosen c) THEN NULL
                              WHEN p.status IN ('succeeded', 'failed', 'cancelled') THEN p.status END
    FROM parents p, retried r
    WHERE d.job_id = r.id AND d.parent_id = p.id
      AND d.parent_outcome IS DISTINCT FROM
          CASE WHEN p.id IN (SELECT c.id FROM chosen c) THEN NULL
               WHEN p.status IN ('succeeded', 'failed', 'cancelled') THEN p.status END
),
wake AS (
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
    FROM (SELECT DISTINCT r.queue FROM retried r WHERE r.status = 'queued') q
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, filters, job_ids)
    SELECT 'retry', %(actor)s::text, %(filters)s::jsonb, array_agg(r.id ORDER BY r.id)
    FROM retried r
    HAVING count(*) > 0
)
SELECT count(*)::integer AS changed, (SELECT w.n FROM wake w) AS woke FROM retried
