-- pgq schema, revision 0032 down: the BEFORE UPDATE triggers of revisions 0002, 0008 and 0028, the
-- row trigger jobs_release_dependents of revision 0007, and revision 0027's claim (a token per job).

-- pgq:function claim@previous
-- pgq:function jobs_notify_cancel@previous

DROP TRIGGER jobs_release_dependents ON pgq.jobs;
-- pgq:function jobs_release_dependents@previous
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_release_dependents();

DROP TRIGGER jobs_collect_finished ON pgq.jobs;
-- pgq:function jobs_collect_finished@previous
CREATE TRIGGER jobs_collect_finished
    BEFORE UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_collect_finished();

DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_update
    BEFORE UPDATE OF payload, result, progress, trace_context ON pgq.jobs
    FOR EACH ROW
    WHEN ((NOT (NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                        AND pg_catalog.pg_column_size(NEW.payload) < 512))
           AND NEW.payload IS DISTINCT FROM OLD.payload)
          OR (NOT (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                          AND pg_catalog.pg_column_size(NEW.result) < 512))
              AND NEW.result IS DISTINCT FROM OLD.result)
          OR (NOT (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                            AND pg_catalog.pg_column_size(NEW.progress) < 512))
              AND NEW.progress IS DISTINCT FROM OLD.progress)
          OR (NEW.trace_context IS NOT NULL AND NEW.trace_context IS DISTINCT FROM OLD.trace_context))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

DROP TRIGGER jobs_guard_admin_transition ON pgq.jobs;
CREATE TRIGGER jobs_guard_admin_transition
    BEFORE UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' OR OLD.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();
