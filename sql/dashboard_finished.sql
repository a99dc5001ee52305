-- dashboard_finished: the jobs that finished in the last hour, counted per queue, status and minute
-- of the database clock: the overview's "last hour" columns and its throughput and failure chart.
-- The window is the current minute and the 59 before it. Minutes are cut with date_bin, which is a
-- few times cheaper per row than date_trunc on timestamptz (no time zone conversion); the origin is
-- a whole UTC minute, so the buckets are whole minutes in every zone.
--
-- A backward range scan of jobs_finished_idx (finished_at, finished jobs only), newest first, that
-- stops after `cap` rows: its cost is that of the hour's jobs, and never more than `cap` of them
-- (50,000: about 25 ms), however busy the hour was. When it stops early (the counts add up to
-- `cap`), the oldest minute returned is counted in part only and the older ones not at all: the
-- dashboard then shows the chart from the next minute on, and says so. Finished jobs older than the
-- hour are never read: no count over the whole table.
WITH recent AS (
    SELECT j.queue, j.status, j.finished_at
    FROM pgq.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at >= date_bin('1 minute', now(), '2000-01-01 00:00:00+00') - interval '59 minutes'
    ORDER BY j.finished_at DESC
    LIMIT %(cap)s
)
-- Grouped by the enum and cast to text after: casting each row first doubled the statement's time.
SELECT g.queue, g.status::text AS status, g.minute, g.jobs
FROM (
    SELECT r.queue, r.status, date_bin('1 minute', r.finished_at, '2000-01-01 00:00:00+00') AS minute,
           count(*) AS jobs
    FROM recent r
    GROUP BY 1, 2, 3
) g
ORDER BY 3, 1, 2
