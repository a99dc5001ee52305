CREATE OR REPLACE FUNCTION pgq.count_finished(recount interval, span interval) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    origin  CONSTANT timestamptz := '2000-01-01 00:00:00+00';
    through timestamptz;
    -- Up to the pass's own time: the current minute's row holds its jobs finished before it, and
    -- readers count the jobs themselves from counted_through on only (a few seconds of them).
    target  timestamptz := now();
    lo      timestamptz;
    hi      timestamptz;
    -- The minutes of the last 8 days are kept (the day's chart, per quarter hour, reads them).
    keep_minutes CONSTANT interval := interval '8 days';
BEGIN
    IF recount IS NULL OR recount < interval '0' OR span IS NULL OR span < interval '1 minute' THEN
        RAISE EXCEPTION 'pgq.count_finished: recount must be >= 0 and span >= 1 minute, got % and %',
            coalesce(recount::text, 'NULL'), coalesce(span::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One pass at a time: the lock of the state's one row. A second caller returns NULL at once.
    SELECT s.counted_through INTO through FROM pgq.finished_counts_state s FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF through IS NULL THEN
        -- The first pass starts at the oldest finished job on record (jobs_finished_idx's first entry).
        lo := pg_catalog.date_bin('1 minute', least(
            (SELECT min(j.finished_at) FROM pgq.jobs j WHERE j.status IN ('succeeded', 'failed', 'cancelled')),
            (SELECT min(d.minute) FROM pgq.finished_counts_deleted d)), origin);
        lo := least(coalesce(lo, target), target);
        hi := least(target, lo + span);
    ELSE
        -- The minutes of the last `recount` before what was counted are counted again: a job whose
        -- finishing transaction committed after the last pass has a finished_at (its transaction's
        -- start) in one of them.
        lo := pg_catalog.date_bin('1 minute', least(through, target) - recount, origin);
        hi := least(target, greatest(through, lo) + span);
    END IF;
    IF hi <= lo THEN
        -- Nothing to count (no finished job yet, or the clock went back): the minutes are counted.
        through := coalesce(through, hi);
        UPDATE pgq.finished_counts_state
        SET counted_through = through, counted_at = now(), recount = count_finished.recount;
        RETURN through;
    END IF;
    DELETE FROM pgq.finished_counts c WHERE c.minute >= lo AND c.minute < hi;
    -- One statement, so one snapshot: a deletion's rows leave pgq.jobs and enter
    -- pgq.finished_counts_deleted together, and are counted once either way.
    INSERT INTO pgq.finished_counts (minute, queue, kind, status, jobs)
    SELECT f.minute, f.queue, f.kind, f.status, sum(f.jobs)
    FROM (
        SELECT pg_catalog.date_bin('1 minute', j.finished_at, origin) AS minute, j.queue, j.kind, j.status,
               count(*) AS jobs
        FROM pgq.jobs j
        WHERE j.status IN ('succeeded', 'failed', 'cancelled') AND j.finished_at >= lo AND j.finished_at < hi
        GROUP BY 1, 2, 3, 4
        UNION ALL
        SELECT d.minute, d.queue, d.kind, d.status, d.jobs
        FROM pgq.finished_counts_deleted d
        WHERE d.minute >= lo AND d.minute < hi
    ) f
    GROUP BY 1, 2, 3, 4;
    -- The hours of those minutes, summed again from the minutes (the last one holds the minutes
    -- before `hi` only: readers take whole hours before counted_through's hour from here).
    DELETE FROM pgq.finished_counts_hourly h
    WHERE h.hour >= pg_catalog.date_bin('1 hour', lo, origin) AND h.hour < hi;
    INSERT INTO pgq.finished_counts_hourly (hour, queue, kind, status, jobs)
    SELECT pg_catalog.date_bin('1 hour', c.minute, origin), c.queue, c.kind, c.status, sum(c.jobs)
    FROM pgq.finished_counts c
    WHERE c.minute >= pg_catalog.date_bin('1 hour', lo, origin) AND c.minute < hi
    GROUP BY 1, 2, 3, 4;
    -- Minutes older than `keep_minutes` are in their hours for good (but those of an hour the next pass
    -- sums again).
    DELETE FROM pgq.finished_counts c
    WHERE c.minute < least(now() - keep_minutes, pg_catalog.date_bin('1 hour', hi - recount, origin));
    -- Deleted jobs of minutes no later pass counts again are in pgq.finished_counts for good.
    DELETE FROM pgq.finished_counts_deleted d WHERE d.minute < hi - recount;
    UPDATE pgq.finished_counts_state SET counted_through = hi, counted_at = now(), recount = count_finished.recount;
    RETURN hi;
END;
$fn$;

COMMENT ON FUNCTION pgq.count_finished(interval, interval) IS
    'One pass of the finished-job counts (revision 0026): counts the jobs that finished (succeeded, failed, '
    'cancelled) per minute, queue, kind and status into pgq.finished_counts, from the last `recount` before '
    'the time already counted up to now (the current minute in part), at most `span` of it per pass, '
    'through jobs_finished_idx, and their hours into pgq.finished_counts_hourly (minutes are kept 8 days). Returns the end of the time counted; NULL when another pass is running. '
    'A job whose finishing transaction commits more than `recount` after the last pass is not counted. '
    'Needs pgq_worker.';
