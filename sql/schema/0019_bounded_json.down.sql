-- Revision 0019 down: JSON from callers is no longer bounded. Stored values stay as they are.
ALTER TABLE pgq.job_audit DROP CONSTRAINT job_audit_filters_bounded;
ALTER TABLE pgq.key_raises DROP CONSTRAINT key_raises_payload_bounded;
DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
DROP TRIGGER jobs_json_bounded_insert ON pgq.jobs;
DROP FUNCTION pgq.jobs_refuse_unbounded_json();
DROP FUNCTION pgq.trace_context_valid(jsonb);
DROP FUNCTION pgq.json_bounded(jsonb);
