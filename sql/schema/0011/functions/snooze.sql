CREATE OR REPLACE FUNCTION pgq.snooze(p_ids bigint[], p_tokens uuid[], p_delays double precision[], p_progress jsonb[],
                           p_lock_timeout text)
RETURNS TABLE (job pgq.jobs, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH snoozed AS (
        UPDATE pgq.jobs j
        SET status = 'queued',
            run_at = now() + make_interval(secs => s.delay_s),
            attempts = greatest(j.attempts - 1, 0),
            lease_token = NULL,
            lease_expires_at = NULL,
            progress = coalesce(s.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_delays, p_progress) AS u(id, token, delay_s, progress)
              ORDER BY u.id) s
        WHERE j.id = ANY(p_ids) AND j.id = s.id AND j.lease_token = s.token
        RETURNING j
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT (z.j).queue FROM snoozed z WHERE (z.j).run_at <= now()) q
    )
    SELECT z.j, (SELECT w.n FROM wake w)
    FROM snoozed z;
END;
$fn$;

COMMENT ON FUNCTION pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text) IS
    'Requeue running attempts under their tokens without spending an attempt (sql/job_snooze.sql).';
