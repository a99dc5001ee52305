-- job_cancel_many: cancel the waiting, queued or running jobs among `ids` (one batch of a bulk
-- cancel), as pgq.cancel does one: a running job's lease is cleared and its worker notified (pgq_cancel);
-- the operation then sends job_after_finish for the batch (dependents, waiters). Rows are locked in
-- id order; a row another transaction holds is waited for. One pgq.job_audit row lists the jobs cancelled. Returns how many.
WITH picked AS (
    SELECT j.id FROM pgq.jobs j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('waiting', 'queued', 'running')
    ORDER BY j.id
    FOR UPDATE OF j  -- the delete's own lock, in id order (a delete, unlike an update, waits for a
                     -- producer's FOR KEY SHARE of a parent: no upgrade in another order later)
),
gone AS (
    -- Revision 0033: the jobs move to pgq.finished_jobs, a delete and an insert in this statement.
    DELETE FROM pgq.live_jobs j
    USING picked p
    WHERE j.id = p.id
    RETURNING j.*
),
cancelled AS (
    INSERT INTO pgq.finished_jobs AS f (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts,
                                        dedupe_key, lease_token, lease_expires_at, claimed_by, last_error, result,
                                        input_watermark, done_watermark, created_at, started_at, finished_at,
                                        progress, awaited, pending_parents, has_dependents, limited, group_key,
                                        trace_context, sequence_key)
    SELECT g.id, g.queue, g.kind, g.payload, g.priority, 'cancelled', g.run_at, g.attempts, g.max_attempts,
           g.dedupe_key, NULL, NULL, g.claimed_by, g.last_error, g.result,
           g.input_watermark, g.done_watermark, g.created_at, g.started_at, now(),
           g.progress, g.awaited, g.pending_parents, g.has_dependents, g.limited, g.group_key,
           g.trace_context, g.sequence_key
    FROM gone g
    ORDER BY g.id
    RETURNING f.id
),
told AS (
    -- The worker of each running job, by the md5 of the lease token it held (pgq.cancel_core's message).
    SELECT count(pg_notify('pgq_cancel', g.id::text || ':' || md5(g.lease_token::text))) AS n
    FROM gone g
    WHERE g.status = 'running'
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, filters, job_ids)
    SELECT 'cancel', %(actor)s::text, %(filters)s::jsonb, array_agg(c.id ORDER BY c.id)
    FROM cancelled c
    HAVING count(*) > 0
)
SELECT count(*)::integer AS changed FROM cancelled
WHERE (SELECT t.n FROM told t) IS NOT NULL  -- evaluates the notifications
