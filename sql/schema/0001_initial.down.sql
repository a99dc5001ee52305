-- Reverts revision 0001. The schema itself stays: it also holds pgq's alembic version table.
DROP VIEW IF EXISTS pgq.running_jobs;
DROP VIEW IF EXISTS pgq.job_counts;
DROP VIEW IF EXISTS pgq.queue_stats;
DROP FUNCTION IF EXISTS pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer);
DROP FUNCTION IF EXISTS pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                         text[], bigint[], integer[]);
DROP TABLE IF EXISTS pgq.concurrency_limits;
DROP TABLE IF EXISTS pgq.key_watermarks;
DROP TABLE IF EXISTS pgq.jobs;
DROP TYPE IF EXISTS pgq.job_status;
