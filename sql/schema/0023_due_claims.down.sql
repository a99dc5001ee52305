-- pgq schema, revision 0023 down: pgq.claim as revision 0021 defined it, and the JSON bounds'
-- triggers and their function as revision 0019 defined them.
-- pgq:function claim@previous
DROP TRIGGER jobs_json_bounded_insert ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.jobs
    FOR EACH ROW
    WHEN (NOT (pgq.json_bounded(NEW.payload) AND pgq.json_bounded(NEW.result)
               AND pgq.json_bounded(NEW.progress) AND pgq.trace_context_valid(NEW.trace_context)))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_update
    BEFORE UPDATE OF payload, result, progress, trace_context ON pgq.jobs
    FOR EACH ROW
    WHEN ((NEW.payload IS DISTINCT FROM OLD.payload AND NOT pgq.json_bounded(NEW.payload))
          OR (NEW.result IS DISTINCT FROM OLD.result AND NOT pgq.json_bounded(NEW.result))
          OR (NEW.progress IS DISTINCT FROM OLD.progress AND NOT pgq.json_bounded(NEW.progress))
          OR (NEW.trace_context IS DISTINCT FROM OLD.trace_context
              AND NOT pgq.trace_context_valid(NEW.trace_context)))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();
-- pgq:function jobs_refuse_unbounded_json@previous
