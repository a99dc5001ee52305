-- pgq schema, revision 0023: claims that read no scheduled job, and a cheaper enqueue (issue #42).
--
-- jobs_claim_idx and jobs_claim_limited_idx put priority before run_at, so `run_at <= now()` was only
-- a filter, and a claim that did not fill its batch walked every scheduled job of its queues (and
-- of its limited kinds). pgq.claim now takes one priority at a time, best first (a loose index scan
-- over the priorities with queued jobs): within a priority, run_at bounds each scan, so a claim
-- costs one probe per priority plus its batch, whatever is scheduled behind it. Same signature and
-- grants; no table or index changes.
-- pgq:function claim

-- The JSON bounds' triggers (revision 0019) called pgq.json_bounded and pgq.trace_context_valid in
-- their WHEN clauses. A WHEN clause is planned again by every statement that fires the trigger, and
-- planning inlines each SQL function from its source: 0.15 ms of every enqueue (0.38 ms against 0.23
-- without) and of every acknowledgement that writes a result, the wake-up's path (W4) included. The
-- clauses now pass small, uncompressed values (the first case of pgq.json_bounded, which returns true
-- for them) with built-in functions only; any other value, and any trace context, goes to the
-- trigger's function, which checks with the same two functions (its plans are cached per session)
-- and refuses exactly what revision 0019 refused.
-- pgq:function jobs_refuse_unbounded_json
DROP TRIGGER jobs_json_bounded_insert ON pgq.jobs;
CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.jobs
    FOR EACH ROW
    WHEN (NOT ((NEW.payload IS NULL OR (pg_catalog.pg_column_compression(NEW.payload) IS NULL
                                        AND pg_catalog.pg_column_size(NEW.payload) < 512))
               AND (NEW.result IS NULL OR (pg_catalog.pg_column_compression(NEW.result) IS NULL
                                           AND pg_catalog.pg_column_size(NEW.result) < 512))
               AND (NEW.progress IS NULL OR (pg_catalog.pg_column_compression(NEW.progress) IS NULL
                                             AND pg_catalog.pg_column_size(NEW.progress) < 512))
               AND NEW.trace_context IS NULL))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

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
