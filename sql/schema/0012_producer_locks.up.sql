-- pgq schema, revision 0012: a producer holds no lock that a worker or an admin waits for.
--
-- Until now two of the producer's functions wrote rows of jobs that already existed, inside the
-- producer's own transaction, which it may leave open for as long as it likes:
--   pgq.enqueue_after  set has_dependents on each unfinished parent (so that the parent's finish ran
--                      the release trigger) after locking the parents FOR NO KEY UPDATE;
--   pgq.mark_awaited   set awaited on the job (so that its finish notified pgq_finished).
-- Each row so written stayed locked until the producer committed: the parent's worker could not
-- renew its lease nor acknowledge it, and an admin could not cancel it.
--
-- Now neither writes the job:
--   * pgq.enqueue_after takes FOR KEY SHARE on the parents (the lock a foreign key check takes),
--     which only a deletion or a key change waits for: every UPDATE of a job (claim, heartbeat,
--     acknowledgement, cancel) goes through. It only keeps pgq.purge from deleting a parent the new
--     edges name before they commit (purge skips locked rows).
--   * pgq.mark_awaited records the wait in pgq.awaited_jobs, a table of its own.
-- Whoever finishes a job now looks for its open edges and its waiters itself: the functions that
-- finish jobs (pgq.complete, complete_skip, fail, fail_skip, cancel, rescue) end with
-- pgq.after_finish(ids), one probe of a partial index of the open edges and one of
-- pgq.awaited_jobs per batch, which releases or cancels the children (pgq.release_children, the
-- release trigger's work made callable) and notifies the waiters.
--
-- What a finish cannot see: edges and waits committed after its statement read them (the
-- producer's transaction was still open). pgq.settle(lim), which every worker runs each second (one
-- at a time: an advisory lock) and the rescue too, settles those: open edges of finished parents,
-- waits of finished jobs. That is the bound a producer's open transaction puts on a child or a
-- waiter: the child of a parent that finished while the producer's transaction was open is released
-- about a second after the producer commits.
--
-- The release trigger stays for the rows revision 0007..0011 marked has_dependents (and for a DBA's
-- own UPDATE of such a row); it now calls pgq.release_children too. pgq.jobs.awaited likewise keeps
-- notifying for the marks made before this revision.

CREATE TABLE pgq.awaited_jobs (
    job_id     bigint PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgq.awaited_jobs IS
    'Jobs a client waits for (Queue.wait, pgq.mark_awaited): finishing one notifies channel '
    'pgq_finished with its id and deletes its row. No foreign key: marking locks no job.';
COMMENT ON COLUMN pgq.awaited_jobs.job_id IS 'The awaited job (pgq.jobs.id).';
COMMENT ON COLUMN pgq.awaited_jobs.created_at IS 'When the wait was marked.';

-- The open edges: what a finish and the settle sweep look up (small: the edges of waiting jobs).
CREATE INDEX job_dependencies_open_idx ON pgq.job_dependencies (parent_id) WHERE parent_outcome IS NULL;

-- Release the waiting children of the finished jobs among `finished` (others and jobs without open
-- edges are ignored): record each parent's outcome on its edges, cancel the children that needed a
-- parent that did not succeed (and, in turn, theirs), count the rest off and queue those with no
-- parent left. Returns the jobs it cancelled. Locks up front, in id order, every waiting job it can
-- change (the children, and the closure a cascade of cancellations can reach), as revision 0009's
-- trigger did; inside a cascade already locked (pgq.cascade_locked on) it locks nothing more.
CREATE FUNCTION pgq.release_children(finished bigint[]) RETURNS bigint[]
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
                           WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     ORDER BY e.parent_id);
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
REVOKE EXECUTE ON FUNCTION pgq.release_children(bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.release_children(bigint[]) IS
    'Release (count off, queue) or cancel the waiting children of the finished jobs among the given '
    'ids; returns the ids it cancelled. Called by pgq.after_finish and the release trigger.';

-- What a statement that finished jobs owes them: their children released, their waiters told.
CREATE FUNCTION pgq.after_finish(finished bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    told bigint;
BEGIN
    IF coalesce(cardinality(finished), 0) = 0 THEN
        RETURN;
    END IF;
    -- Two probes of small indexes (open edges, waits), each driven by the ids: most batches stop here.
    IF EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL) THEN
        finished := finished || pgq.release_children(finished);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgq.awaited_jobs a WHERE a.job_id = ANY(finished)) THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM pgq.awaited_jobs a
        WHERE a.job_id = ANY(finished)
          AND EXISTS (SELECT 1 FROM pgq.jobs j
                      WHERE j.id = a.job_id AND j.status IN ('succeeded', 'failed', 'cancelled'))
        RETURNING a.job_id
    )
    SELECT count(pg_notify('pgq_finished', g.job_id::text)) INTO told FROM gone g;
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.after_finish(bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION pgq.after_finish(bigint[]) IS
    'Release the children and notify the waiters (pgq.awaited_jobs) of the finished jobs among the '
    'given ids; what every function that finishes jobs runs last.';

-- The sweep: what finishes could not see because a producer committed after them.
CREATE FUNCTION pgq.settle(lim integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents bigint[];
    waited  bigint[];
    told    bigint;
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        RAISE EXCEPTION 'pgq.settle: lim must be >= 1, got %', coalesce(lim::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One settle at a time (every worker runs it each second): the others have nothing to add.
    IF NOT pg_try_advisory_xact_lock(1885827428) THEN
        RETURN 0;
    END IF;
    parents := ARRAY(SELECT e.parent_id
                     FROM (SELECT DISTINCT d.parent_id FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL) e
                     WHERE (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id)
                           IN ('succeeded', 'failed', 'cancelled')
                     LIMIT lim);
    -- Waits of jobs that finished (or are gone: purged, deleted by hand).
    waited := ARRAY(SELECT a.job_id FROM pgq.awaited_jobs a
                    WHERE coalesce((SELECT j.status FROM pgq.jobs j WHERE j.id = a.job_id)
                                   NOT IN ('waiting', 'queued', 'running'), true)
                    ORDER BY a.job_id
                    LIMIT lim);
    PERFORM pgq.after_finish(parents || waited);
    -- A gone job's wait: nobody finishes it any more; tell its waiter (who reads it and finds it gone).
    WITH gone AS (
        DELETE FROM pgq.awaited_jobs a
        WHERE a.job_id = ANY(waited) AND NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = a.job_id)
        RETURNING a.job_id
    )
    SELECT count(pg_notify('pgq_finished', g.job_id::text)) INTO told FROM gone g;
    RETURN cardinality(parents) + cardinality(waited);
END;
$fn$;
REVOKE EXECUTE ON FUNCTION pgq.settle(integer) FROM PUBLIC;
COMMENT ON FUNCTION pgq.settle(integer) IS
    'Settle up to lim finished parents with open edges and lim waits of finished jobs that their '
    'finish did not see (the producer committed later); workers run it each second, and the rescue. '
    'Returns how many (0 when another settle holds its lock).';

-- The release trigger (rows marked has_dependents before this revision): the same work, callable.
CREATE OR REPLACE FUNCTION pgq.jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents bigint[];
BEGIN
    parents := string_to_array(rtrim(coalesce(current_setting('pgq.finished_parents', true), ''), ','), ',')::bigint[];
    IF coalesce(cardinality(parents), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgq.finished_parents', '', true);
    PERFORM pgq.release_children(parents);
    RETURN NULL;
END;
$fn$;

-- The parents: FOR KEY SHARE (no UPDATE waits for it), and no write to them.
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
BEGIN
    IF cardinality(edge_jobs) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'pgq.enqueue_after: edge_jobs and edge_parents differ in length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM pgq.jobs j
    WHERE j.id IN (SELECT DISTINCT p FROM unnest(edge_parents) AS p)
    ORDER BY j.id
    FOR KEY SHARE OF j;
    SELECT p INTO missing FROM unnest(edge_parents) AS p
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = p) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: there is no job % (never enqueued, or purged)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT i.ord, nextval(pg_get_serial_sequence('pgq.jobs', 'id')) AS id, i.kind,
               coalesce(i.payload, '{}') AS payload, coalesce(i.queue, 'default') AS queue,
               coalesce(i.priority, 0)::smallint AS priority,
               coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()) AS run_at,
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
                              pending_parents, finished_at, last_error, limited)
        SELECT u.id, u.kind, u.payload, u.queue, u.priority, u.run_at, u.max_attempts,
               CASE WHEN s.doomed_by IS NOT NULL THEN 'cancelled'
                    WHEN s.pending > 0 THEN 'waiting' ELSE 'queued' END::pgq.job_status,
               s.pending,
               CASE WHEN s.doomed_by IS NOT NULL THEN now() END,
               CASE WHEN s.doomed_by IS NOT NULL THEN
                   format('parent job %s %s', s.doomed_by,
                          (SELECT e.parent_status FROM edges e WHERE e.ord = u.ord AND e.parent_id = s.doomed_by))
               END,
               u.kind IN (SELECT l.kind FROM pgq.concurrency_limits l UNION ALL SELECT r.kind FROM pgq.rate_limits r)
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

-- A wait is a row of pgq.awaited_jobs; the job is not written. Same signature and contract: the job
-- if this statement marked it (waiting, queued or running, not marked yet), no row otherwise.
CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH marked AS (
        INSERT INTO pgq.awaited_jobs (job_id)
        SELECT j.id FROM pgq.jobs j
        WHERE j.id = mark_awaited.job_id AND j.status::text IN ('waiting', 'queued', 'running')
        ON CONFLICT DO NOTHING
        RETURNING awaited_jobs.job_id
    )
    SELECT j.* FROM pgq.jobs j JOIN marked m ON m.job_id = j.id;
$fn$;
COMMENT ON FUNCTION pgq.mark_awaited(bigint) IS
    'Mark a waiting, queued or running job awaited (Queue.wait): a row of pgq.awaited_jobs, so that '
    'finishing the job notifies channel pgq_finished. Returns the job, or no row when it was not marked now.';

-- The finishing functions: each becomes its former body (renamed *_core; the worker's functions
-- executable by their owner only) followed by pgq.after_finish of the batch; the rescue is rewritten
-- below.
ALTER FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) RENAME TO complete_core;
ALTER FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) RENAME TO complete_skip_core;
ALTER FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) RENAME TO fail_core;
ALTER FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    RENAME TO fail_skip_core;
ALTER FUNCTION pgq.cancel(bigint) RENAME TO cancel_core;
REVOKE EXECUTE ON FUNCTION
    pgq.complete_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip_core(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip_core(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean)
    FROM PUBLIC;

CREATE FUNCTION pgq.complete(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                             p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.complete_core(p_ids, p_tokens, p_results, p_watermarks, p_progress, p_lock_timeout);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;
COMMENT ON FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) IS
    'Finish attempts successfully under their lease tokens (sql/job_complete.sql): one row per attempt '
    'still held, (id, new status, queues woken); lost leases are left out. Then pgq.after_finish.';

CREATE FUNCTION pgq.complete_skip(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                                  p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.complete_skip_core(p_ids, p_tokens, p_results, p_watermarks, p_progress, p_wait);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;
COMMENT ON FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) IS
    'pgq.complete for rows another transaction may hold (sql/job_complete_skip.sql): held rows are '
    'skipped unless p_wait and reported busy. Then pgq.after_finish.';

CREATE FUNCTION pgq.fail(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.fail_core(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress,
                                             p_lock_timeout);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;
COMMENT ON FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Fail attempts under their lease tokens (sql/job_fail.sql): retried later, or failed for good. '
    'Then pgq.after_finish.';

CREATE FUNCTION pgq.fail_skip(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.fail_skip_core(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress,
                                                  p_wait);
    PERFORM pgq.after_finish(p_ids);
END;
$fn$;
COMMENT ON FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql). Then pgq.after_finish.';

-- The rescue locks expired rows FOR NO KEY UPDATE now (was FOR UPDATE, which waited for, and so
-- skipped, a parent a producer holds FOR KEY SHARE), then settles what finishes could not see.
CREATE OR REPLACE FUNCTION pgq.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text, queue text, kind text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    ids      bigint[];
    statuses text[];
    names    text[];
    kinds    text[];
    n_woke   bigint;
BEGIN
    WITH expired AS (
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    rescued AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = now(),
            last_error = 'lease expired at ' || j.lease_expires_at::text
                         || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
        FROM expired e
        WHERE j.id = e.id
        RETURNING j.id, j.status, j.queue, j.kind
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
    )
    SELECT array_agg(r.id ORDER BY r.id), array_agg(r.status::text ORDER BY r.id),
           array_agg(r.queue ORDER BY r.id), array_agg(r.kind ORDER BY r.id), (SELECT w.n FROM wake w)
    INTO ids, statuses, names, kinds, n_woke
    FROM rescued r;
    RETURN QUERY SELECT r.id, r.status, r.queue, r.kind, n_woke
                 FROM unnest(ids, statuses, names, kinds) AS r(id, status, queue, kind);
    PERFORM pgq.after_finish(ids);
    PERFORM pgq.settle(1000);
END;
$fn$;
COMMENT ON FUNCTION pgq.rescue(integer) IS
    'Take back up to p_limit attempts whose lease expired (sql/job_rescue.sql): requeued, or failed when '
    'they used their last attempt. Touches no row whose lease still runs. Then settles (pgq.settle).';

CREATE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    PERFORM pgq.after_finish(ARRAY[job_id]);
END;
$fn$;
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel); its dependents '
    'that needed it to succeed are cancelled too, and its waiters told. Returns the job if cancelled.';

REVOKE EXECUTE ON FUNCTION
    pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean),
    pgq.rescue(integer)
    FROM PUBLIC;
-- pgq.cancel and pgq.cancel_core run as their caller, as pgq.cancel always did: executable by anyone,
-- the table's grants decide (only the admin role may update pgq.jobs).
