CREATE OR REPLACE FUNCTION pgq.fail_skip_core(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- One plan for every batch (revision 0033): the statement below, of many parts over a partitioned
-- table, took PostgreSQL about 5 million instructions to plan, which it did again for each call.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT u.id, u.token, u.error, u.retry_in, u.final, u.progress
        FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
             AS u(id, token, error, retry_in, final, progress)
    ),
    tokened AS (
        SELECT j.id
        FROM pgq.live_jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        -- The rows still held under their tokens, locked in id order, SKIP LOCKED unless p_wait (FOR UPDATE: a finished one is
        -- deleted below), and what each becomes, decided once on the row as locked: failed for good
        -- (final, or its last attempt) or queued again after its backoff.
        SELECT j.id, s.token, s.error, s.retry_in, s.progress,
               coalesce(s.final OR j.attempts >= j.max_attempts, false) AS final
        FROM pgq.live_jobs j
        JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id, s.token, s.error, s.retry_in, s.progress,
               coalesce(s.final OR j.attempts >= j.max_attempts, false) AS final
        FROM pgq.live_jobs j
        JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    held AS (
        SELECT l.* FROM skipping l UNION ALL SELECT l.* FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT t.id, 1 AS n FROM tokened t UNION ALL SELECT h.id, -1 FROM held h) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    retried AS (
        UPDATE pgq.live_jobs j
        SET status = 'queued',
            run_at = now() + make_interval(secs => coalesce(
                h.retry_in,
                greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0)))),
            last_error = h.error,
            progress = coalesce(h.progress, j.progress),
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = NULL
        FROM held h
        WHERE j.id = h.id AND j.lease_token = h.token AND NOT h.final
        RETURNING j.*
    ),
    gone AS (
        DELETE FROM pgq.live_jobs j
        USING held h
        WHERE j.id = h.id AND j.lease_token = h.token AND h.final
        RETURNING j.*, h.error AS new_error, h.progress AS new_progress
    ),
    moved AS (
        INSERT INTO pgq.finished_jobs AS m
            (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key,
             lease_token, lease_expires_at, claimed_by, last_error, result, input_watermark, done_watermark,
             created_at, started_at, finished_at, progress, awaited, pending_parents, has_dependents,
             limited, group_key, trace_context, sequence_key)
        SELECT g.id, g.queue, g.kind, g.payload, g.priority, 'failed', g.run_at, g.attempts, g.max_attempts,
               g.dedupe_key,
               NULL, NULL, g.claimed_by, g.new_error, g.result, g.input_watermark, g.done_watermark,
               g.created_at, g.started_at, now(), coalesce(g.new_progress, g.progress), g.awaited,
               g.pending_parents, g.has_dependents,
               g.limited, g.group_key, g.trace_context, g.sequence_key
        FROM gone g  -- no ORDER BY (revision 0035): sorting whole rows cost 4,000 instructions a job
        RETURNING m.*
    )
    SELECT r::pgq.jobs, false FROM retried r
    UNION ALL
    SELECT m::pgq.jobs, false FROM moved m
    UNION ALL
    -- The busy jobs by their ids (status as text: one plan serves every call, and the running jobs'
    -- index would read every entry left since the last vacuum).
    SELECT ROW(j.*)::pgq.jobs, true
    FROM pgq.live_jobs j
    WHERE NOT p_wait AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b)) AND j.status::text = 'running';
END;
$fn$;

COMMENT ON FUNCTION pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql): locks first, in id order, SKIP '
    'LOCKED unless p_wait; rows skipped come back unchanged with busy true.';
