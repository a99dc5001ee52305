CREATE OR REPLACE FUNCTION pgq.jobs_refuse_unbounded_json() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    what text;
BEGIN
    what := CASE
        WHEN NOT pgq.json_bounded(NEW.payload) THEN 'payload'
        WHEN NOT pgq.json_bounded(NEW.result) THEN 'result'
        WHEN NOT pgq.json_bounded(NEW.progress) THEN 'progress'
        ELSE 'trace context' END;
    IF what = 'trace context' THEN
        RAISE EXCEPTION 'the trace context of a job must be {"traceparent": text of at most 256 characters, '
                        '"tracestate": text of at most 512}, with no other key'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_trace_context_valid', TABLE = TG_TABLE_NAME,
                  SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RAISE EXCEPTION 'the % of a job nests deeper than 64 levels or is larger than 8 MiB as jsonb', what
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_json_bounded', TABLE = TG_TABLE_NAME,
              SCHEMA = TG_TABLE_SCHEMA;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_refuse_unbounded_json() IS
    'Trigger of pgq.jobs: refuse a payload, result or progress out of pgq.json_bounded, or a trace context '
    'out of pgq.trace_context_valid (revision 0019). Runs only when its WHEN clause found one.';
