CREATE OR REPLACE FUNCTION pgq.jobs_refuse_unbounded_json() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    what text;
BEGIN
    -- Revision 0023: the triggers' WHEN clauses only pass over small values (built-in functions), so
    -- this function decides: the row as it is when within bounds, else the error. On an update, only
    -- a column that changed is checked (an older row out of bounds stays updatable otherwise).
    IF TG_OP = 'INSERT' THEN
        what := CASE
            WHEN NOT pgq.json_bounded(NEW.payload) THEN 'payload'
            WHEN NOT pgq.json_bounded(NEW.result) THEN 'result'
            WHEN NOT pgq.json_bounded(NEW.progress) THEN 'progress'
            WHEN NOT pgq.trace_context_valid(NEW.trace_context) THEN 'trace context' END;
    ELSE
        what := CASE
            WHEN NEW.payload IS DISTINCT FROM OLD.payload AND NOT pgq.json_bounded(NEW.payload) THEN 'payload'
            WHEN NEW.result IS DISTINCT FROM OLD.result AND NOT pgq.json_bounded(NEW.result) THEN 'result'
            WHEN NEW.progress IS DISTINCT FROM OLD.progress AND NOT pgq.json_bounded(NEW.progress) THEN 'progress'
            WHEN NEW.trace_context IS DISTINCT FROM OLD.trace_context
                 AND NOT pgq.trace_context_valid(NEW.trace_context) THEN 'trace context' END;
    END IF;
    IF what IS NULL THEN
        RETURN NEW;
    END IF;
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
    'out of pgq.trace_context_valid (revision 0019; on an update, the columns that changed). Runs only '
    'for rows its WHEN clause could not pass as small (revision 0023); returns the row when within bounds.';
