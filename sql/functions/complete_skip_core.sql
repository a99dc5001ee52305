CREATE OR REPLACE FUNCTION pgq.complete_skip_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                                  p_watermarks bigint[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- One plan for every batch (revision 0033): the statement below, of many parts over a partitioned
-- table, took PostgreSQL about 5 million instructions to plan, which it did again for each call.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token, d.result, d.watermark, d.progress
        FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
             AS d(id, token, result, watermark, progress)
    ),
    sent AS (
        SELECT j.id
        FROM pgq.live_jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        -- The rows still held under their tokens, locked in id order (FOR UPDATE: a finished one is
        -- deleted below), SKIP LOCKED unless p_wait, and what each becomes, decided once on the row
        -- as locked: a dirty re-run (a newer watermark arrived while it ran, on the job or raised on
        -- its key) or a success.
        SELECT j.id, d.token, d.result, d.watermark, d.progress, k.raised,
               coalesce(j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                        OR (j.dedupe_key IS NOT NULL AND k.raised > coalesce(d.watermark, k.raised - 1)),
                        false) AS rerun
        FROM pgq.live_jobs j
        JOIN done d ON j.id = d.id AND j.lease_token = d.token
        CROSS JOIN LATERAL (SELECT CASE WHEN j.dedupe_key IS NOT NULL
                                        THEN pgq.key_raised(j.queue, j.dedupe_key) END AS raised) k
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id, d.token, d.result, d.watermark, d.progress, k.raised,
               coalesce(j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                        OR (j.dedupe_key IS NOT NULL AND k.raised > coalesce(d.watermark, k.raised - 1)),
                        false) AS rerun
        FROM pgq.live_jobs j
        JOIN done d ON j.id = d.id AND j.lease_token = d.token
        CROSS JOIN LATERAL (SELECT CASE WHEN j.dedupe_key IS NOT NULL
                                        THEN pgq.key_raised(j.queue, j.dedupe_key) END AS raised) k
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    held AS (
        SELECT l.* FROM skipping l UNION ALL SELECT l.* FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT s.id, 1 AS n FROM sent s UNION ALL SELECT h.id, -1 FROM held h) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    rerun AS (
        UPDATE pgq.live_jobs j
        SET status = 'queued',
            result = h.result,
            progress = coalesce(h.progress, j.progress),
            done_watermark = greatest(j.done_watermark, h.watermark),
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, h.raised) END,
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = 0,
            run_at = now(),
            finished_at = NULL
        FROM held h
        WHERE j.id = h.id AND j.lease_token = h.token AND h.rerun
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
    ),
    gone AS (
        DELETE FROM pgq.live_jobs j
        USING held h
        WHERE j.id = h.id AND j.lease_token = h.token AND NOT h.rerun
        RETURNING j.*, h.result AS new_result, h.watermark AS new_watermark, h.progress AS new_progress,
                  h.raised AS raised
    ),
    moved AS (
        INSERT INTO pgq.finished_jobs AS m
            (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key,
             lease_token, lease_expires_at, claimed_by, last_error, result, input_watermark, done_watermark,
             created_at, started_at, finished_at, progress, awaited, pending_parents, has_dependents,
             limited, group_key, trace_context, sequence_key)
        SELECT g.id, g.queue, g.kind, g.payload, g.priority, 'succeeded', g.run_at, g.attempts, g.max_attempts,
               g.dedupe_key,
               NULL, NULL, g.claimed_by, g.last_error, g.new_result,
               CASE WHEN g.dedupe_key IS NULL THEN g.input_watermark
                    ELSE greatest(g.input_watermark, g.raised) END,
               greatest(g.done_watermark, g.new_watermark),
               g.created_at, g.started_at, now(), coalesce(g.new_progress, g.progress), g.awaited,
               g.pending_parents, g.has_dependents,
               g.limited, g.group_key, g.trace_context, g.sequence_key
        FROM gone g  -- no ORDER BY (revision 0035): sorting whole rows cost 4,000 instructions a job
        RETURNING m.id, m.status, m.queue, m.dedupe_key, m.done_watermark
    ),
    finished AS (
        SELECT r.id, r.status, r.queue, r.dedupe_key, r.done_watermark FROM rerun r
        UNION ALL
        SELECT m.id, m.status, m.queue, m.dedupe_key, m.done_watermark FROM moved m
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
    )
    SELECT f.id, f.status::text, (SELECT w.n FROM wake w)
    FROM finished f
    UNION ALL
    SELECT b.id, NULL::text, NULL::bigint FROM busy b
    WHERE NOT p_wait;
END;
$fn$;
