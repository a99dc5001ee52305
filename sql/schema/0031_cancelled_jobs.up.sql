-- pgq schema, revision 0031: a queue's cancelled jobs, newest first, for the dashboard's queue page
-- (issue #44).
--
-- The queue page's cancelled tab read the newest 100,000 finished jobs of every queue through
-- jobs_finished_idx to find those of one queue that were cancelled (621 ms at 10,000,000 finished
-- jobs), and counted only among those. jobs_cancelled_idx holds a queue's cancelled jobs in the order
-- the tab lists them (finished_at, id): the tab reads its page and stops; the count reads the
-- queue's entries only, index-only, up to a cap. One index entry per job that is cancelled; other
-- finishes write nothing more (status is indexed already, so updates that were HOT stay HOT).
--
-- Its condition adds one every id meets (the least bigint), as jobs_failed_id_idx's does (revision
-- 0029): only statements that say it too read it. Without it the planner may take this index for other
-- searches of cancelled jobs (`pgq jobs list --status cancelled`, the jobs page), reading all of a
-- queue's cancelled jobs where jobs_pkey would stop at the page. sql/dashboard_queue_tab.sql and
-- sql/dashboard_queue_counts.sql say it.
CREATE INDEX jobs_cancelled_idx ON pgq.jobs (queue, finished_at, id)
    WHERE status = 'cancelled' AND id >= '-9223372036854775808'::bigint;
COMMENT ON INDEX pgq.jobs_cancelled_idx IS
    'Cancelled jobs per queue, newest first: the dashboard''s cancelled tab and its count (revision 0031).';
