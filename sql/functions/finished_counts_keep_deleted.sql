CREATE OR REPLACE FUNCTION pgq.finished_counts_keep_deleted() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- Finished jobs deleted (retention, a bulk delete) from minutes that pgq.count_finished may count
    -- again: their counts stay. Older minutes are counted for good already; the first pass (no minute
    -- counted yet) reads them all.
    INSERT INTO pgq.finished_counts_deleted AS d (minute, queue, kind, status, jobs)
    SELECT pg_catalog.date_bin('1 minute', g.finished_at, '2000-01-01 00:00:00+00'), g.queue, g.kind, g.status,
           count(*)
    FROM gone g
    WHERE g.status IN ('succeeded', 'failed', 'cancelled') AND g.finished_at IS NOT NULL
      -- Revision 0033: not a job that moved back to pgq.live_jobs in the same statement (a retry).
      AND NOT EXISTS (SELECT 1 FROM pgq.live_jobs l WHERE l.id = g.id)
      AND g.finished_at >= coalesce((SELECT pg_catalog.date_bin('1 minute', s.counted_through - s.recount,
                                                                  '2000-01-01 00:00:00+00')
                                     FROM pgq.finished_counts_state s), '-infinity')
    GROUP BY 1, 2, 3, 4
    ON CONFLICT (minute, queue, kind, status) DO UPDATE SET jobs = d.jobs + excluded.jobs;
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.finished_counts_keep_deleted() IS
    'Trigger of pgq.jobs, after each DELETE statement (revision 0026): keeps the counts of the finished '
    'jobs it deleted from minutes that pgq.count_finished counts again, in pgq.finished_counts_deleted.';
