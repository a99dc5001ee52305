-- pgq schema, revision 0026 down: no finished-job counts.
DROP TRIGGER jobs_deleted_keep_counts ON pgq.jobs;
DROP FUNCTION pgq.finished_counts_keep_deleted();
DROP FUNCTION pgq.count_finished(interval, interval);
DROP TABLE pgq.finished_counts_state;
DROP TABLE pgq.finished_counts_deleted;
DROP TABLE pgq.finished_counts_hourly;
DROP TABLE pgq.finished_counts;
