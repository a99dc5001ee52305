-- Revision 0016 down: keyed enqueues write the key's active job again (revision 0014's
-- pgq.enqueue_many, revision 0011's completions, revision 0012's settle).
--
-- No raised watermark is lost: new raises wait for this transaction (the table's lock), those
-- pending are folded into the key's active job (waiting for its row, as a migration may), and the
-- rest get what the settle would have given them (a new job where a finished job did not run the
-- raise), before the table goes. A raise left then (a producer's open transaction inserting its key,
-- past a minute) fails the downgrade: run it again.
LOCK TABLE pgq.key_raises IN EXCLUSIVE MODE;
DELETE FROM pgq.key_raises x
USING pgq.key_watermarks w
WHERE w.queue = x.queue AND w.dedupe_key = x.dedupe_key AND w.done_watermark >= x.watermark;
UPDATE pgq.jobs j SET input_watermark = greatest(j.input_watermark, x.watermark)
FROM (SELECT r.queue, r.dedupe_key, max(r.watermark) AS watermark
      FROM pgq.key_raises r GROUP BY r.queue, r.dedupe_key) x
WHERE j.queue = x.queue AND j.dedupe_key = x.dedupe_key AND j.status IN ('queued', 'running');
DELETE FROM pgq.key_raises x
USING pgq.jobs j
WHERE j.queue = x.queue AND j.dedupe_key = x.dedupe_key AND j.status IN ('queued', 'running')
  AND j.input_watermark >= x.watermark;
SELECT pgq.settle_raises(2147483647, 60000);
DO $check$
BEGIN
    IF EXISTS (SELECT 1 FROM pgq.key_raises) THEN
        RAISE EXCEPTION 'pgq.key_raises still holds raises another transaction keeps from settling; run the downgrade again'
            USING ERRCODE = 'object_in_use';
    END IF;
END
$check$;

-- pgq:function enqueue_many@previous

CREATE OR REPLACE FUNCTION pgq.complete_core(p_ids bigint[], p_tokens uuid[], p_results jsonb[],
                                             p_watermarks bigint[], p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token, d.result, d.watermark, d.progress
        FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
             AS d(id, token, result, watermark, progress)
        ORDER BY d.id
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                               THEN NULL ELSE now() END
        FROM done d
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
    FROM finished f;
END;
$fn$;
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
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
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
-- pgq:function settle@previous

-- pgq:function claim@previous
DROP FUNCTION pgq.settle_raises(integer, integer);
DROP FUNCTION pgq.key_raised(text, text);
DROP TABLE pgq.key_raises;
