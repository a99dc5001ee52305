-- Revision 0015 down: drop the trace context of jobs and its setter (the contexts stored are lost).
DROP FUNCTION pgq.trace_context_set(bigint[], jsonb[]);
ALTER TABLE pgq.jobs DROP COLUMN trace_context;
