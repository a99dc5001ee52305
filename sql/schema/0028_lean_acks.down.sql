-- pgq schema, revision 0028 down: the bounds of revision 0020 in days and revision 0023's JSON
-- update trigger, which compares before it measures.
ALTER TABLE pgq.jobs
    DROP CONSTRAINT jobs_run_at_bounded,
    DROP CONSTRAINT jobs_lease_bounded,
    ADD CONSTRAINT jobs_run_at_bounded
        CHECK (run_at >= '1900-01-01 00:00:00+00' AND run_at <= now() + interval '36526 days'),
    ADD CONSTRAINT jobs_lease_bounded
        CHECK (lease_expires_at >= '1900-01-01 00:00:00+00' AND lease_expires_at <= now() + interval '1 day 1 hour');

DROP TRIGGER jobs_json_bounded_update ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_update
    BEFORE UPDATE OF payload, result, progress, trace_context ON pgq.jobs
    FOR EACH ROW
    WHEN ((NEW.payload IS DISTINCT FROM OLD.payload
           AND NOT (NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                            AND pg_catalog.pg_column_size(NEW.payload) < 512)))
          OR (NEW.result IS DISTINCT FROM OLD.result
              AND NOT (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                              AND pg_catalog.pg_column_size(NEW.result) < 512)))
          OR (NEW.progress IS DISTINCT FROM OLD.progress
              AND NOT (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                                AND pg_catalog.pg_column_size(NEW.progress) < 512)))
          OR (NEW.trace_context IS DISTINCT FROM OLD.trace_context AND NEW.trace_context IS NOT NULL))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();
