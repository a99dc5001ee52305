-- pgq schema, revision 0032: no BEFORE UPDATE row trigger on pgq.jobs, and one lease token per claim
-- (issues #43 and #47, step 1 of docs/design/lean-table.md).
--
-- A BEFORE UPDATE row trigger makes PostgreSQL lock each row it updates before the trigger's WHEN
-- is even evaluated (to hand the trigger the row's newest version), and that lock writes a WAL
-- record of its own: 3.6 lock records a job over enqueue and drain, a third of the drain's WAL, for
-- three triggers that almost never run. The same checks as AFTER UPDATE triggers lock nothing:
--   - jobs_guard_admin_transition and jobs_json_bounded_update raise the same errors with the same
--     WHEN clauses; an AFTER row trigger's error undoes its statement as a BEFORE one's did;
--   - jobs_collect_finished notes the finished parents after each row instead of before it, and
--     jobs_release_dependents, which released all of them on its first call (a row trigger), is now
--     a statement trigger: it runs once at the end of every statement that sets status, after every
--     row's note, and finds nothing to do unless a job with dependents finished.
-- A claim now draws one lease token for all the jobs it takes instead of one per job. The jobs of a
-- claim are its caller's, so a token still fences each job's attempt; but a token must now never
-- leave pgq's functions for anyone else: the cancellation notice names the md5 of the token instead
-- of the token (anyone who may connect can LISTEN on pgq_cancel), which workers match.

DROP TRIGGER jobs_guard_admin_transition ON pgq.jobs;
CREATE TRIGGER jobs_guard_admin_transition
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' OR OLD.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_guard_admin_transition();

DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_update
    AFTER UPDATE OF payload, result, progress, trace_context ON pgq.jobs
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

-- pgq:function jobs_collect_finished
DROP TRIGGER jobs_collect_finished ON pgq.jobs;
CREATE TRIGGER jobs_collect_finished
    AFTER UPDATE ON pgq.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION pgq.jobs_collect_finished();

-- pgq:function jobs_release_dependents
-- After the row triggers of its statement (PostgreSQL fires a statement's AFTER STATEMENT triggers
-- after its AFTER ROW ones).
DROP TRIGGER jobs_release_dependents ON pgq.jobs;
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF status ON pgq.jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.jobs_release_dependents();

-- pgq:function jobs_notify_cancel
-- pgq:function claim
