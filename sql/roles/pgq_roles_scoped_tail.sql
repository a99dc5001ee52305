
-- 4. Of the tables, only what a client of a scoped set reads: its jobs and their raises (row
-- security), the version, limits and pauses; and a new job's input columns. The views and the other
-- tables show every queue; the limit tables' writes would change other queues' kinds.
REVOKE ALL ON ALL TABLES IN SCHEMA pgq FROM {producer}, {worker};
GRANT SELECT ON pgq.jobs, pgq.key_raises, pgq.alembic_version, pgq.paused_queues, pgq.concurrency_limits,
                pgq.rate_limits, pgq.group_limits
    TO {producer};
GRANT INSERT (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited, group_key)
    ON pgq.jobs TO {producer};
