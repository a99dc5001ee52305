-- dashboard_finished_counts: the jobs that finished from `since` on, per bucket of `bucket` (whole
-- minutes, from a whole UTC hour), queue, kind and status: the dashboard's counts and charts.
-- What pgq.finished_counts holds (the jobs finished before dashboard_counts_state.sql's
-- counted_through: its minute's row holds its jobs up to then)
-- comes from it: the minutes [m1_from, m1_to) and [m2_from, m2_to) from pgq.finished_counts, the
-- whole hours [h_from, h_to) between them from pgq.finished_counts_hourly (the caller splits the
-- range so; hours only where the buckets are whole hours or only totals are wanted): ranges of their
-- primary keys, a row per minute or hour, queue, kind and status, whatever the number of jobs. Jobs
-- deleted from the minutes not counted yet come from pgq.finished_counts_deleted. The rest, from
-- `live_from` (counted_through: the seconds since the last pass), is counted from the
-- jobs: a backward range scan of jobs_finished_idx (finished jobs only) that stops after `cap` rows,
-- so that a dashboard whose counts are not kept (no worker running) costs what the last `cap`
-- finished jobs cost, no more. `live` says which rows came from the jobs: when they add up to
-- `cap`, the count is partial. Finished jobs older than `since` are never read. With `buckets`
-- false, no buckets: only the rows per queue, kind and status are returned (the overview's 24 hours:
-- some 300 rows per hour and queue fewer to group, send and decode).
WITH counted AS (
    SELECT c.minute AS at, c.queue, c.kind, c.status, c.jobs
    FROM pgq.finished_counts c
    WHERE c.minute >= %(m1_from)s::timestamptz AND c.minute < %(m1_to)s::timestamptz
    UNION ALL
    SELECT c.minute, c.queue, c.kind, c.status, c.jobs
    FROM pgq.finished_counts c
    WHERE c.minute >= %(m2_from)s::timestamptz AND c.minute < %(m2_to)s::timestamptz
    UNION ALL
    SELECT h.hour, h.queue, h.kind, h.status, h.jobs
    FROM pgq.finished_counts_hourly h
    WHERE h.hour >= %(h_from)s::timestamptz AND h.hour < %(h_to)s::timestamptz
    UNION ALL
    SELECT d.minute, d.queue, d.kind, d.status, d.jobs
    FROM pgq.finished_counts_deleted d
    WHERE d.minute >= %(live_from)s::timestamptz
),
recent AS (
    SELECT j.finished_at AS at, j.queue, j.kind, j.status
    FROM pgq.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at >= %(live_from)s::timestamptz
    ORDER BY j.finished_at DESC
    LIMIT %(cap)s
)
-- Two groupings in one pass: per bucket, queue and status (the charts; `live` apart), and per queue,
-- kind and status over the whole window (the counts per kind); NULL marks the column left out. Grouped
-- by the enum and cast to text after: casting each row first doubled the statement's time.
SELECT g.bucket, g.queue, g.kind, g.status::text AS status, g.jobs, g.live
FROM (
    SELECT u.bucket, u.queue, u.kind, u.status, sum(u.jobs)::bigint AS jobs, u.live
    FROM (
        SELECT CASE WHEN %(buckets)s::boolean THEN date_bin(%(bucket)s::interval, c.at, '2000-01-01 00:00:00+00') END
                   AS bucket, c.queue, c.kind, c.status, c.jobs, false AS live
        FROM counted c
        UNION ALL
        SELECT CASE WHEN %(buckets)s::boolean THEN date_bin(%(bucket)s::interval, r.at, '2000-01-01 00:00:00+00') END,
               r.queue, r.kind, r.status, count(*), true
        FROM recent r
        GROUP BY 1, 2, 3, 4
    ) u
    GROUP BY GROUPING SETS ((u.bucket, u.queue, u.status, u.live), (u.queue, u.kind, u.status))
) g
WHERE %(buckets)s::boolean OR g.kind IS NOT NULL
