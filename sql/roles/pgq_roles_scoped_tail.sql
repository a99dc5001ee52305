
-- 4. Of the tables, only what a client of a scoped set reads: its jobs and their raises (row
-- security), the version, limits and pauses; and a new job's input columns. The views and the other
-- tables show every queue; the limit tables' writes would change other queues' kinds.
REVOKE ALL ON ALL TABLES IN SCHEMA pgq FROM {producer}, {worker};
GRANT SELECT ON pgq.key_raises, pgq.alembic_version, pgq.paused_queues, pgq.concurrency_limits,
                pgq.rate_limits, pgq.group_limits
    TO {producer};
-- Every column of pgq.jobs but lease_token (revision 0020: the token is the claiming session's secret),
-- found in the catalog so that columns of newer revisions are included.
DO $jobcols$
BEGIN
    EXECUTE (SELECT pg_catalog.format('GRANT SELECT (%s) ON pgq.jobs TO %I',
                                      pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum),
                                      {producer_name})
             FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = 'pgq.jobs'::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attname <> 'lease_token');
END
$jobcols$;
-- Limits are per kind across every queue (revision 0020's setters): a scoped worker sets none.
REVOKE EXECUTE ON FUNCTION
    pgq.concurrency_limit_set(text, integer),
    pgq.rate_limit_set(text, integer, double precision),
    pgq.group_limits_set(text, integer, integer, double precision)
    FROM {worker};
GRANT INSERT (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited, group_key)
    ON pgq.jobs TO {producer};
