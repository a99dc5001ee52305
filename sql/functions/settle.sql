CREATE OR REPLACE FUNCTION pgq.settle(lim integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- No JIT (revision 0035): its reads of pgq.jobs read a few rows by index, but on a big live table a plan's
-- estimate passes jit_above_cost, and it would be compiled again at every call (pgq.next_run_at's took
-- 90-280 ms).
SET jit = off
AS $fn$
DECLARE
    parents bigint[] := '{}';
    waited  bigint[] := '{}';
    told    bigint;
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        RAISE EXCEPTION 'pgq.settle: lim must be >= 1, got %', coalesce(lim::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One settle at a time (every worker runs it each second): the others have nothing to add. The
    -- row lock of its pgq.leaders row (revision 0021): no role without pgq's rights can hold it.
    PERFORM 1 FROM pgq.leaders l WHERE l.step = 'settle' FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The lock rows of dedupe keys no producer used for an hour (pgq.enqueue_unique upserts them
    -- again): a few per run, rows a producer holds left alone.
    DELETE FROM pgq.unique_locks u
    WHERE (u.queue, u.dedupe_key) IN (SELECT o.queue, o.dedupe_key FROM pgq.unique_locks o
                                      WHERE o.used_at < statement_timestamp() - interval '1 hour'
                                      ORDER BY o.used_at LIMIT lim
                                      FOR UPDATE SKIP LOCKED);
    -- Revision 0035: each read of pgq.jobs below runs only when its small table has a row to settle.
    -- Planned for nothing, each cost a drain's settle 130 ms: the planner reads the ends of the live
    -- partition's indexes, over every dead entry a drain leaves there.
    IF EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL) THEN
        parents := ARRAY(SELECT e.parent_id
                         FROM (SELECT d.parent_id, bool_and(d.sequence_hold IS TRUE) AS held
                               FROM pgq.job_dependencies d WHERE d.parent_outcome IS NULL
                               GROUP BY d.parent_id) e
                         CROSS JOIN LATERAL (SELECT p.status FROM pgq.jobs p WHERE p.id = e.parent_id) s
                         WHERE s.status IN ('succeeded', 'cancelled') OR (s.status = 'failed' AND NOT e.held)
                         LIMIT lim);
    END IF;
    -- Waits of jobs that finished (or are gone: purged, deleted by hand).
    IF EXISTS (SELECT 1 FROM pgq.awaited_jobs) THEN
        waited := ARRAY(SELECT a.job_id FROM pgq.awaited_jobs a
                        WHERE coalesce((SELECT j.status FROM pgq.jobs j WHERE j.id = a.job_id)
                                       NOT IN ('waiting', 'queued', 'running'), true)
                        ORDER BY a.job_id
                        LIMIT lim);
    END IF;
    PERFORM pgq.after_finish(parents || waited);
    -- A gone job's wait: nobody finishes it any more; tell its waiter (who reads it and finds it gone).
    IF cardinality(waited) > 0 THEN
        WITH gone AS (
            DELETE FROM pgq.awaited_jobs a
            WHERE a.job_id = ANY(waited) AND NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = a.job_id)
            RETURNING a.job_id
        )
        SELECT count(pg_notify('pgq_finished', g.job_id::text)) INTO told FROM gone g;
    END IF;
    -- Revision 0016: the raises of keyed enqueues.
    RETURN cardinality(parents) + cardinality(waited) + pgq.settle_raises(lim);
END;
$fn$;

COMMENT ON FUNCTION pgq.settle(integer) IS
    'Settle up to lim finished parents with open edges and lim waits of finished jobs that their '
    'finish did not see (the producer committed later), and the raises of up to lim keys '
    '(pgq.settle_raises); workers run it each second, and the rescue. Returns how many (0 when another '
    'settle holds its lock).';
