CREATE OR REPLACE FUNCTION pgq.jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents bigint[];
    kids bigint[];
    counts integer[];
    dooms bigint[];
    woke bigint;
BEGIN
    -- Every parent the statement finished (jobs_collect_finished): the first call takes them all.
    parents := string_to_array(rtrim(coalesce(current_setting('pgq.finished_parents', true), ''), ','), ',')::bigint[];
    IF coalesce(cardinality(parents), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgq.finished_parents', '', true);  -- cancelled children note their own below

    -- Their waiting children, locked in id order: the one order of every transaction that releases.
    PERFORM 1 FROM pgq.jobs c
    WHERE c.id IN (SELECT d.job_id FROM pgq.job_dependencies d
                   WHERE d.parent_id = ANY(parents) AND d.parent_outcome IS NULL)
      AND c.status = 'waiting'
    ORDER BY c.id
    FOR NO KEY UPDATE OF c;

    -- Record each parent's outcome on its edges; per child, how many of its parents finished and the
    -- first one that failed or was cancelled, if it needed them to succeed.
    WITH marked AS (
        UPDATE pgq.job_dependencies d SET parent_outcome = p.status
        FROM pgq.jobs p
        WHERE d.parent_id = ANY(parents) AND d.parent_outcome IS NULL
          AND p.id = d.parent_id AND p.status IN ('succeeded', 'failed', 'cancelled')
        RETURNING d.job_id, d.parent_id, d.needs_success, p.status
    ),
    per_child AS (
        SELECT m.job_id, count(*)::integer AS n,
               min(m.parent_id) FILTER (WHERE m.needs_success AND m.status <> 'succeeded') AS doomed_by
        FROM marked m
        GROUP BY m.job_id
    )
    SELECT array_agg(k.job_id ORDER BY k.job_id), array_agg(k.n ORDER BY k.job_id),
           array_agg(k.doomed_by ORDER BY k.job_id)
    INTO kids, counts, dooms
    FROM per_child k;
    IF kids IS NULL THEN
        RETURN NULL;
    END IF;

    -- Cancel those that needed a parent that did not succeed (their own children follow, through these
    -- triggers again, at the end of this statement) ...
    UPDATE pgq.jobs c
    SET status = 'cancelled',
        pending_parents = c.pending_parents - k.n,
        finished_at = now(),
        last_error = format('parent job %s %s', k.doomed_by, (SELECT p.status FROM pgq.jobs p WHERE p.id = k.doomed_by))
    FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
    WHERE c.id = k.id AND k.doomed_by IS NOT NULL AND c.status = 'waiting';
    -- ... and count the finished parents off the others, which are queued (and wake their workers)
    -- when none is left.
    WITH ready AS (
        UPDATE pgq.jobs c
        SET pending_parents = c.pending_parents - k.n,
            status = CASE WHEN c.pending_parents <= k.n THEN 'queued' ELSE 'waiting' END::pgq.job_status,
            run_at = CASE WHEN c.pending_parents <= k.n THEN greatest(c.run_at, now()) ELSE c.run_at END
        FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
        WHERE c.id = k.id AND k.doomed_by IS NULL AND c.status = 'waiting'
        RETURNING c.queue, c.status
    )
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END))
    INTO woke
    FROM (SELECT DISTINCT r.queue FROM ready r WHERE r.status = 'queued') q;
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_release_dependents() IS
    'Trigger of pgq.jobs: the jobs with dependents that a statement finishes (noted by '
    'jobs_collect_finished) release their children (count themselves off their pending_parents) or '
    'cancel those that needed them to succeed; the first call of the statement does it for all.';
