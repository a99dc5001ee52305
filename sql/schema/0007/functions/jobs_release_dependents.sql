CREATE OR REPLACE FUNCTION pgq.jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    doomed bigint[];
    released bigint[];
    woke bigint;
BEGIN
    WITH marked AS (
        UPDATE pgq.job_dependencies d SET parent_outcome = NEW.status
        WHERE d.parent_id = NEW.id AND d.parent_outcome IS NULL
        RETURNING d.job_id, d.needs_success
    )
    SELECT array_agg(m.job_id ORDER BY m.job_id) FILTER (WHERE m.needs_success AND NEW.status <> 'succeeded'),
           array_agg(m.job_id ORDER BY m.job_id) FILTER (WHERE NOT (m.needs_success AND NEW.status <> 'succeeded'))
    INTO doomed, released
    FROM marked m;

    IF doomed IS NOT NULL THEN
        UPDATE pgq.jobs c
        SET status = 'cancelled',
            pending_parents = c.pending_parents - 1,
            finished_at = now(),
            last_error = format('parent job %s %s', NEW.id, NEW.status)
        WHERE c.id = ANY(doomed) AND c.status = 'waiting';
    END IF;
    IF released IS NOT NULL THEN
        WITH ready AS (
            UPDATE pgq.jobs c
            SET pending_parents = c.pending_parents - 1,
                status = CASE WHEN c.pending_parents <= 1 THEN 'queued' ELSE 'waiting' END::pgq.job_status,
                run_at = CASE WHEN c.pending_parents <= 1 THEN greatest(c.run_at, now()) ELSE c.run_at END
            WHERE c.id = ANY(released) AND c.status = 'waiting'
            RETURNING c.queue, c.status
        )
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END))
        INTO woke
        FROM (SELECT DISTINCT r.queue FROM ready r WHERE r.status = 'queued') q;
    END IF;
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_release_dependents() IS
    'Trigger of pgq.jobs: a job with dependents that finishes releases them (counts itself off their '
    'pending_parents) or cancels those that needed it to succeed.';
