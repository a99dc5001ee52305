CREATE OR REPLACE FUNCTION pgq.release_children(finished bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents   bigint[];
    kids      bigint[];
    counts    integer[];
    dooms     bigint[];
    cancelled bigint[] := '{}';
    level     bigint[];
    woke      bigint;
    outermost boolean := false;
BEGIN
    -- Driven by the open edges of the given ids, each parent's status read by its key (a join could
    -- start from the index of every finished job).
    parents := ARRAY(SELECT e.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL
                             AND d.sequence_hold IS NOT TRUE) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     UNION
                     -- Held edges: released only by a parent that succeeded or was cancelled.
                     SELECT h.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL AND d.sequence_hold) h
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = h.parent_id) IN ('succeeded', 'cancelled')
                     ORDER BY 1);
    IF cardinality(parents) = 0 THEN
        RETURN cancelled;
    END IF;

    IF coalesce(current_setting('pgq.cascade_locked', true), '') <> 'on' THEN
        outermost := true;
        -- The waiting children of the parents and of every job a cascade will cancel (reached from a
        -- failed or cancelled parent through edges that need it to succeed), in id order.
        PERFORM 1 FROM pgq.jobs c
        WHERE c.id IN (
            WITH RECURSIVE doomed(id) AS (
                SELECT p.id FROM pgq.jobs p
                WHERE p.id = ANY(parents) AND p.status IN ('failed', 'cancelled')
              UNION
                SELECT d.job_id
                FROM doomed x
                JOIN pgq.job_dependencies d ON d.parent_id = x.id AND d.parent_outcome IS NULL AND d.needs_success
                JOIN pgq.jobs k ON k.id = d.job_id AND k.status = 'waiting'
            )
            SELECT d.job_id FROM pgq.job_dependencies d
            WHERE d.parent_outcome IS NULL
              AND (d.parent_id = ANY(parents) OR d.parent_id IN (SELECT x.id FROM doomed x))
        )
          AND c.status = 'waiting'
        ORDER BY c.id
        FOR NO KEY UPDATE OF c;
        -- Marks the rows held for the legacy trigger calls the updates below may fire, and for the
        -- levels of this loop.
        PERFORM set_config('pgq.cascade_locked', 'on', true);
    END IF;

    LOOP
        WITH marked AS (
            UPDATE pgq.job_dependencies d SET parent_outcome = p.status
            FROM pgq.jobs p
            WHERE d.parent_id = ANY(parents) AND d.parent_outcome IS NULL
              AND p.id = d.parent_id AND p.status IN ('succeeded', 'failed', 'cancelled')
              AND NOT (d.sequence_hold IS TRUE AND p.status = 'failed')
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
        EXIT WHEN kids IS NULL;

        -- Cancel those that needed a parent that did not succeed ...
        WITH gone AS (
            UPDATE pgq.jobs c
            SET status = 'cancelled',
                pending_parents = c.pending_parents - k.n,
                finished_at = now(),
                last_error = format('parent job %s %s', k.doomed_by,
                                    (SELECT p.status FROM pgq.jobs p WHERE p.id = k.doomed_by))
            FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
            WHERE c.id = k.id AND k.doomed_by IS NOT NULL AND c.status = 'waiting'
            RETURNING c.id
        )
        SELECT coalesce(array_agg(g.id ORDER BY g.id), '{}') INTO level FROM gone g;
        -- A child about to be queued whose dedupe key another active job holds (a replacement queued
        -- behind a running job, revision 0018, released late by the settle after a plain enqueue took
        -- the freed key) would break jobs_dedupe_active_uq: it waits for that job too (one more edge,
        -- needing no success), as it waited for the job it replaces.
        WITH held AS (
            SELECT c.id, (SELECT a.id FROM pgq.jobs a
                          WHERE a.queue = c.queue AND a.dedupe_key = c.dedupe_key
                            AND a.status IN ('queued', 'running') AND a.id <> c.id
                          ORDER BY a.id LIMIT 1) AS holder
            FROM unnest(kids, counts, dooms) AS k(id, n, doomed_by)
            JOIN pgq.jobs c ON c.id = k.id
            WHERE k.doomed_by IS NULL AND c.status = 'waiting' AND c.dedupe_key IS NOT NULL
              AND c.pending_parents <= k.n
        ),
        chained AS (
            INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success)
            SELECT h.id, h.holder, false FROM held h WHERE h.holder IS NOT NULL
            ORDER BY h.id
            ON CONFLICT DO NOTHING
            RETURNING job_id
        )
        UPDATE pgq.jobs c SET pending_parents = c.pending_parents + 1
        FROM chained x WHERE c.id = x.job_id;
        -- ... and count the finished parents off the others, which are queued (and wake their
        -- workers) when none is left.
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

        -- The cancelled children are finished parents in turn: the next level.
        cancelled := cancelled || level;
        parents := level;
        EXIT WHEN cardinality(parents) = 0;
    END LOOP;

    IF outermost THEN
        PERFORM set_config('pgq.cascade_locked', '', true);
    END IF;
    RETURN cancelled;
END;
$fn$;

COMMENT ON FUNCTION pgq.release_children(bigint[]) IS
    'Release (count off, queue) or cancel the waiting children of the finished jobs among the given '
    'ids; returns the ids it cancelled. Called by pgq.after_finish and the release trigger.';
