CREATE OR REPLACE FUNCTION pgq.snooze_skip(p_ids bigint[], p_tokens uuid[], p_delays double precision[], p_progress jsonb[],
                                p_wait boolean)
RETURNS TABLE (job pgq.jobs, woke bigint, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT s.id, s.token FROM unnest(p_ids, p_tokens) AS s(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.live_jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.live_jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.live_jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    snoozed AS (
        UPDATE pgq.live_jobs j
        SET status = 'queued',
            run_at = now() + make_interval(secs => s.delay_s),
            attempts = greatest(j.attempts - 1, 0),
            lease_token = NULL,
            lease_expires_at = NULL,
            progress = coalesce(s.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_delays, p_progress) AS u(id, token, delay_s, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) s
        WHERE j.id = ANY(p_ids) AND j.id = s.id AND j.lease_token = s.token
        RETURNING j::pgq.jobs AS j
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT (z.j).queue FROM snoozed z WHERE (z.j).run_at <= now()) q
    )
    SELECT z.j, (SELECT w.n FROM wake w), false
    FROM snoozed z
    UNION ALL
    SELECT j::pgq.jobs, NULL::bigint, true
    FROM pgq.live_jobs j
    WHERE NOT p_wait AND j.id = ANY(p_ids)
      AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b));
END;
$fn$;

COMMENT ON FUNCTION pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean) IS
    'pgq.snooze for rows another transaction may hold (sql/job_snooze_skip.sql): rows skipped come back '
    'unchanged with busy true.';
