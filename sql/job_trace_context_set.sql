-- job_trace_context_set: store the W3C trace context of jobs this transaction just enqueued (an
-- instrumented client, pgq.otel), one JSON object (or NULL) per id. Sent after the enqueue statement,
-- in its transaction; pgq.trace_context_set (sql/functions/trace_context_set.sql) sets only rows the
-- transaction inserted itself and that have no context yet.
SELECT pgq.trace_context_set(%(ids)s::bigint[], %(contexts)s::text[]::jsonb[])
