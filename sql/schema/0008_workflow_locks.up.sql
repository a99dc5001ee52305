-- pgq schema, revision 0008: the locks of workflows, taken so that no two transactions wait for
-- each other. (1) pgq.enqueue_after takes its parents' locks without ever waiting while it holds some
-- of them; (2) a statement that finishes parents locks all the children it releases at once, in id
-- order, instead of parent by parent.
--
-- (1) Revision 0007 locked a new job's parents in id order, waiting for each, on the assumption that
-- acknowledgements lock their jobs in that order too. They do not: job_complete and job_fail lock
-- the jobs of a batch in whatever order their plan visits them (the input order, the index's, or
-- the heap's). An enqueue holding parent 1 and waiting for parent 2 while a batch holding 2 waits
-- for 1 is a deadlock, which PostgreSQL breaks after deadlock_timeout (1 s) by failing one side:
-- often the enqueue, whose caller then gets DeadlockDetected. Sorting the batch does not help (the
-- heap's order is not the ids'), and locking a batch's rows in order before updating them would
-- cost every acknowledgement of every job a second write per row.
--
-- So the enqueue takes all its parents' locks at once or none: NOWAIT, in a subtransaction that a
-- refusal rolls back (releasing the locks taken), then a pause of 1 to 10 ms holding nothing, and
-- again. The holders are acknowledgements, heartbeats and claims, a few milliseconds each. A
-- subtransaction per call (only for jobs with dependencies) is the price; a caller enqueueing more
-- than 64 of those one call at a time in one transaction overflows PostgreSQL's cache of
-- subtransaction ids for its duration (use enqueue_many: one call for the batch).
--
-- Same signature: the grants stay.
--
-- (2) Revision 0007's trigger released each finished parent's children in its own call, one call per
-- parent in the order the statement updated them. Two acknowledgements finishing A, B and C, D, with
-- children of A and D and of B and C, could each lock one child and wait for the other: a deadlock,
-- broken after deadlock_timeout (1 s) by failing one acknowledgement, which its worker sends again a
-- second late (a DAG run of three workers took twice as long for one). Now a BEFORE trigger notes
-- every parent the statement finishes (in the transaction-local setting pgq.finished_parents) as the
-- row is updated; the first AFTER call of the statement locks the waiting children of all of them in
-- id order, then marks the edges and counts them off per child, and the statement's other calls find
-- nothing left to do. The note is only a hint: what is released is read from the tables (finished
-- parents, edges without an outcome), so a stray id changes nothing.
CREATE OR REPLACE FUNCTION pgq.enqueue_after(
    kinds          text[],
    payloads       jsonb[],
    queues         text[],
    priorities     smallint[],
    run_ats        timestamptz[],
    delays         double precision[],
    max_attempts   integer[],
    run_on_failure boolean[],
    edge_jobs      integer[],
    edge_parents   bigint[]
) RETURNS TABLE (ord bigint, id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    missing bigint;
    tries integer := 0;  -- LOCK_TRIES: 50, about half a second of pauses
BEGIN
    IF cardinality(edge_jobs) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'pgq.enqueue_after: edge_jobs and edge_parents differ in length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The parents, all at once or none: NOWAIT in a subtransaction, whose failure releases the
    -- locks it took; then a pause holding none, and again (why: sql/schema/0008_workflow_locks.up.sql). After LOCK_TRIES tries
    -- it waits like any lock, so that a circle through the caller's own transaction (parents it
    -- locked in an earlier call) is still found and broken by PostgreSQL.
    IF cardinality(edge_parents) > 0 THEN
        LOOP
            BEGIN
                IF tries < 50 THEN
                    PERFORM 1 FROM pgq.jobs j
                    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
                    ORDER BY j.id
                    FOR NO KEY UPDATE OF j NOWAIT;
                ELSE
                    PERFORM 1 FROM pgq.jobs j
                    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
                    ORDER BY j.id
                    FOR NO KEY UPDATE OF j;
                END IF;
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                tries := tries + 1;
                PERFORM pg_sleep(0.001 * least(tries, 10));
            END;
        END LOOP;
    END IF;
    SELECT p INTO missing FROM unnest(edge_parents) AS p
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = p) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: there is no job % (never enqueued, or purged)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- Unfinished parents learn that their finish matters (the release trigger's WHEN clause).
    UPDATE pgq.jobs j SET has_dependents = true
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
      AND j.status IN ('waiting', 'queued', 'running') AND j.has_dependents IS NOT TRUE;

    RETURN QUERY
    WITH input AS (
        SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, now() + make_interval(secs => i.delay), now()) AS run_at,
               coalesce(i.max_attempts, 25) AS max_attempts, coalesce(i.run_on_failure, false) AS run_on_failure
        FROM unnest(kinds, payloads, queues, priorities, run_ats, delays, max_attempts, run_on_failure)
             WITH ORDINALITY AS i(kind, payload, queue, priority, run_at, delay, max_attempts, run_on_failure, ord)
    ),
    edges AS (
        SELECT DISTINCT e.ord, e.parent_id, p.status AS parent_status
        FROM unnest(edge_jobs, edge_parents) AS e(ord, parent_id)
        JOIN pgq.jobs p ON p.id = e.parent_id
    ),
    state AS (
        SELECT u.ord,
               count(e.parent_id) FILTER (WHERE e.parent_status IN ('waiting', 'queued', 'running')) AS pending,
               min(e.parent_id) FILTER (WHERE e.parent_status IN ('failed', 'cancelled')
                                          AND NOT u.run_on_failure) AS doomed_by
        FROM input u
        LEFT JOIN edges e ON e.ord = u.ord
        GROUP BY u.ord
    ),
    ins AS (
        INSERT INTO pgq.jobs (id, kind, payload, queue, priority, run_at, max_attempts, status,
                              pending_parents, finished_at, last_error)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END
        FROM input u JOIN state s ON s.ord = u.ord
        ORDER BY u.ord
        RETURNING pgq.jobs.id, pgq.jobs.queue, pgq.jobs.status
    ),
    deps AS (
        INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome)
        SELECT u.id, e.parent_id, NOT u.run_on_failure,
               CASE WHEN e.parent_status IN ('succeeded', 'failed', 'cancelled') THEN e.parent_status END
        FROM edges e JOIN input u ON u.ord = e.ord
    ),
    woke AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM ins r WHERE r.status = 'queued') q
    )
    SELECT u.ord, u.id FROM input u, woke ORDER BY u.ord;
END;
$fn$;


CREATE FUNCTION pgq.jobs_collect_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM set_config('pgq.finished_parents',
                       coalesce(current_setting('pgq.finished_parents', true), '') || NEW.id::text || ',', true);
    RETURN NEW;
END;
$fn$;
COMMENT ON FUNCTION pgq.jobs_collect_finished() IS
    'Trigger of pgq.jobs (before update): notes a job with dependents that this statement finishes in '
    'the setting pgq.finished_parents, which jobs_release_dependents then handles in one go.';

-- Same WHEN clause as jobs_release_dependents: plain column tests, no call for jobs nobody depends on.
CREATE TRIGGER jobs_collect_finished
    BEFORE UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_collect_finished();

-- Same signature, same trigger: the body is replaced.
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
