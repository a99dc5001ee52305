CREATE OR REPLACE FUNCTION pgq.trace_context_set(p_ids bigint[], p_contexts jsonb[])
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH wanted AS (
        SELECT w.id, w.context
        FROM unnest(p_ids, p_contexts) AS w(id, context)
        WHERE w.context IS NOT NULL AND pg_catalog.jsonb_typeof(w.context) = 'object'
    ),
    locked AS (
        SELECT j.id, wanted.context
        FROM pgq.jobs j JOIN wanted ON wanted.id = j.id
        WHERE j.created_at = pg_catalog.now() AND j.trace_context IS NULL
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    done AS (
        UPDATE pgq.jobs j SET trace_context = locked.context
        FROM locked WHERE j.id = locked.id
        RETURNING 1
    )
    SELECT count(*)::integer FROM done
$fn$;

COMMENT ON FUNCTION pgq.trace_context_set(bigint[], jsonb[]) IS
    'Store the trace context of jobs the calling transaction enqueued (pgq.otel); only rows without one. '
    'Returns how many rows were set.';
