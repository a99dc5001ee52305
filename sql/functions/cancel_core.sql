CREATE OR REPLACE FUNCTION pgq.cancel_core(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH locked AS (
        -- Through pgq.jobs: its UPDATE privilege (an administrator's) is checked before anything. The
        -- delete's own lock (FOR UPDATE: it waits for a producer's FOR KEY SHARE of a parent), taken
        -- here so that the delete need not upgrade it.
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running')
        FOR UPDATE OF j
    ),
    gone AS (
        DELETE FROM pgq.live_jobs l
        USING locked k
        WHERE l.id = k.id
        RETURNING l.*
    ),
    moved AS (
        INSERT INTO pgq.finished_jobs (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts,
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
        RETURNING *
    ),
    told AS (
        -- The worker of a running job, by the md5 of the lease token it held (revision 0032).
        SELECT count(pg_notify('pgq_cancel', g.id::text || ':' || md5(g.lease_token::text))) AS n
        FROM gone g
        WHERE g.status = 'running'
    )
    SELECT m.* FROM moved m
    WHERE (SELECT t.n FROM told t) IS NOT NULL;
$fn$;

COMMENT ON FUNCTION pgq.cancel_core(bigint) IS
    'Cancel a queued or running job and return it (no row: no such job, or finished already). A '
    'running job''s worker is told to stop its handler. Needs an administrator (pgq_admin).';
