-- pgq schema, revision 0015: the W3C trace context of the span that enqueued a job (pgq.otel).
--
-- A nullable column that only instrumented clients fill: adding it rewrites nothing, and an
-- uninstrumented enqueue sends exactly the statements it sent before (no parameter more), so
-- tracing costs nothing while it is off. An instrumented enqueue runs its usual statement and then,
-- in the same transaction, pgq.trace_context_set with the ids it got back: the enqueue functions
-- (pgq.enqueue_many, pgq.enqueue_after) and the plain INSERTs stay as they are, and every enqueue
-- path (single, batch, deduplicated, with dependencies, a worker's follow-ups) is traced the same way.
ALTER TABLE pgq.jobs ADD COLUMN trace_context jsonb;
COMMENT ON COLUMN pgq.jobs.trace_context IS
    'The W3C trace context (traceparent, tracestate) of the span that enqueued the job, as a JSON object; '
    'NULL when the enqueuing client was not instrumented (pgq.otel).';

-- Sets the trace context of jobs the calling transaction inserted itself: `created_at = now()` (the
-- column's default is the inserting transaction's start, which a savepoint shares) and no context
-- yet. A producer can so neither overwrite a context nor tag a job someone else enqueued (a
-- deduplicated enqueue returns the older job's id: it keeps its own context). The rows are new in
-- this transaction, so no other transaction can hold their locks; they are still taken in id order.
-- Returns how many rows were set.
-- pgq:function trace_context_set
REVOKE EXECUTE ON FUNCTION pgq.trace_context_set(bigint[], jsonb[]) FROM PUBLIC;
