-- pgq schema, revision 0029: the newest failed jobs by id, for the dashboard's failed list (issue #44).
--
-- The jobs page filtered on `failed` lists failed jobs newest first (by id) and, once a window of the
-- newest ids held too few, reads the rest from the status's partial index (sql/dashboard_jobs_indexed.sql).
-- jobs_failed_idx (queue, finished_at) has no id order: every failed job was read and sorted, one heap
-- page each; 4.4 s at 10,000,000 finished jobs (103,000 failed) behind a backlog of 100,000 queued
-- ones. jobs_failed_id_idx reads them in id order and stops at the page. One index entry per job that
-- fails for good; succeeding and retried jobs write nothing more (status was indexed already, so
-- updates that were HOT stay HOT).
--
-- Its condition adds one every id meets (the least bigint), so that only statements that say it too
-- read it: with `status = 'failed'` alone, the planner took this index (its order is the heap's) for
-- the newest failed jobs of one queue too, reading all of them instead of the newest through
-- jobs_failed_idx. sql/dashboard_jobs_failed.sql and sql/dashboard_failed_groups.sql say it.
CREATE INDEX jobs_failed_id_idx ON pgq.jobs (id) WHERE status = 'failed' AND id >= '-9223372036854775808'::bigint;
COMMENT ON INDEX pgq.jobs_failed_id_idx IS
    'Failed jobs in id order: the dashboard''s failed list, newest first (revision 0029).';
