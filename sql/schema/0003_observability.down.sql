-- Reverts revision 0003: drops its views and indexes, and puts pgq.jobs' storage settings back to
-- the server defaults (pages already written keep their fill).
DROP VIEW IF EXISTS pgq.workers;
DROP VIEW IF EXISTS pgq.failing_jobs;
DROP VIEW IF EXISTS pgq.stuck_jobs;
DROP VIEW IF EXISTS pgq.queue_backlog;
DROP INDEX IF EXISTS pgq.jobs_retrying_idx;
DROP INDEX IF EXISTS pgq.jobs_failed_idx;
ALTER TABLE pgq.jobs RESET (
    fillfactor,
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor,
    autovacuum_analyze_threshold,
    autovacuum_vacuum_cost_limit,
    autovacuum_vacuum_cost_delay
);
