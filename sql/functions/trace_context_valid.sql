CREATE OR REPLACE FUNCTION pgq.trace_context_valid(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
    SELECT v IS NULL OR COALESCE(
        pg_catalog.jsonb_typeof(v) = 'object'
        AND v OPERATOR(pg_catalog.-) '{traceparent,tracestate}'::text[] OPERATOR(pg_catalog.=) '{}'::jsonb
        AND pg_catalog.jsonb_typeof(v OPERATOR(pg_catalog.->) 'traceparent') = 'string'
        AND pg_catalog.length(v OPERATOR(pg_catalog.->>) 'traceparent') <= 256
        AND COALESCE(pg_catalog.jsonb_typeof(v OPERATOR(pg_catalog.->) 'tracestate'), 'string') = 'string'
        AND COALESCE(pg_catalog.length(v OPERATOR(pg_catalog.->>) 'tracestate'), 0) <= 512, false)
$fn$;

COMMENT ON FUNCTION pgq.trace_context_valid(jsonb) IS
    'Whether a stored trace context is NULL or {"traceparent": text of at most 256 characters, optional '
    '"tracestate": text of at most 512}, nothing else (revision 0019).';
