CREATE OR REPLACE FUNCTION pgq.complete_skip_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                                  p_watermarks bigint[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token
        FROM unnest(p_ids, p_tokens) AS d(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                   ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END,
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                   OR (j.dedupe_key IS NOT NULL
                                       AND pgq.key_raised(j.queue, j.dedupe_key)
                                           > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                 OR (j.dedupe_key IS NOT NULL
                                     AND pgq.key_raised(j.queue, j.dedupe_key)
                                         > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                                      OR (j.dedupe_key IS NOT NULL
                                          AND pgq.key_raised(j.queue, j.dedupe_key)
                                              > coalesce(d.watermark, pgq.key_raised(j.queue, j.dedupe_key) - 1))
                               THEN NULL ELSE now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
                 AS u(id, token, result, watermark, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
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
