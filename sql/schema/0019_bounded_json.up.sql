-- pgq schema, revision 0019: JSON from callers is bounded in depth and size, and a stored trace
-- context holds only a W3C traceparent and tracestate.
--
-- Bounds (docs/concepts.md, "Bounded JSON"; pgq/bounds.py holds the same numbers):
--   * depth: no value nests more than 64 levels below the top (the top value is level 0; a value
--     inside it level 1; jsonpath `strict $.**{65}` finds nothing);
--   * size: the jsonb value takes at most 8 MiB (8,388,608 bytes; pg_column_size of the value as
--     stored, uncompressed). The Python client's own limit, 1,000,000 bytes of JSON text, always fits.
--   * trace context: NULL, or an object with a string "traceparent" of at most 256 characters and
--     optionally a string "tracestate" of at most 512, and no other key.
--
-- Where. pgq.jobs (payload, result, progress, trace_context) is checked by a BEFORE INSERT trigger
-- and a BEFORE UPDATE OF those columns trigger whose WHEN clauses hold the whole check: the
-- trigger function runs only to raise, so an accepted row pays for the expression alone (about
-- 0.3 µs per inserted row; bench/json_bounds.py). Not CHECK constraints, on purpose:
--   * a CHECK runs on every UPDATE of a row, whatever the columns: each claim, heartbeat and
--     completion would walk the payload again (8 µs per update for a 5 KB payload), and
--   * pgq.jobs may be big, so a constraint would have to be NOT VALID, and a NOT VALID CHECK still
--     refuses any UPDATE of an older row that breaks it: one poisoned job written before this
--     revision would make every claim that picks it fail as a whole. The triggers leave older rows
--     updatable (claimed, failed, cancelled); the worker fails an attempt whose job it cannot decode.
-- Every path that writes these columns goes through them: the enqueue functions, pgq.after_success
-- and the other follow-ups (they INSERT), complete/fail/heartbeat (UPDATE), trace_context_set, and
-- a direct INSERT or UPDATE by any role but a superuser who disables triggers.
-- pgq.key_raises.payload and pgq.job_audit.filters are insert-only: plain CHECK constraints, added
-- NOT VALID so that the migration scans neither table (rows written before it are not checked).
-- The errors carry the constraint name jobs_json_bounded (or the CHECK's name), which the client
-- turns into pgq.InvalidJob.

-- A STABLE SQL function, not IMMUTABLE: pg_column_size and pg_column_compression are STABLE in the
-- catalog, and only a function no less volatile than its body is inlined into the WHEN clause (as
-- IMMUTABLE it cost 1.5 µs per row instead of 0.05). The result depends on the value alone.
-- A value under 512 bytes cannot reach level 65 (each level takes at least 8 bytes), so small
-- payloads skip the jsonpath. A compressed value (copied from another table's row) is measured
-- after decompression: its stored size says nothing of its depth or its real size.
-- pgq:function json_bounded

-- pgq:function trace_context_valid

-- The triggers' WHEN clauses and the CHECKs call these two as the role that writes the row (a
-- producer's direct INSERT, a worker's completion, an administrator's bulk action): every role must
-- keep EXECUTE on them. They read nothing but their argument.
GRANT EXECUTE ON FUNCTION pgq.json_bounded(jsonb), pgq.trace_context_valid(jsonb) TO PUBLIC;

-- Raises for the row its trigger's WHEN clause found out of bounds, naming the first column that is.
-- pgq:function jobs_refuse_unbounded_json

CREATE TRIGGER jobs_json_bounded_insert
    BEFORE INSERT ON pgq.jobs
    FOR EACH ROW
    WHEN (NOT (pgq.json_bounded(NEW.payload) AND pgq.json_bounded(NEW.result)
               AND pgq.json_bounded(NEW.progress) AND pgq.trace_context_valid(NEW.trace_context)))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

-- Only a column that changed is checked: an older row out of bounds stays updatable otherwise.
CREATE TRIGGER jobs_json_bounded_update
    BEFORE UPDATE OF payload, result, progress, trace_context ON pgq.jobs
    FOR EACH ROW
    WHEN ((NEW.payload IS DISTINCT FROM OLD.payload AND NOT pgq.json_bounded(NEW.payload))
          OR (NEW.result IS DISTINCT FROM OLD.result AND NOT pgq.json_bounded(NEW.result))
          OR (NEW.progress IS DISTINCT FROM OLD.progress AND NOT pgq.json_bounded(NEW.progress))
          OR (NEW.trace_context IS DISTINCT FROM OLD.trace_context
              AND NOT pgq.trace_context_valid(NEW.trace_context)))
    EXECUTE FUNCTION pgq.jobs_refuse_unbounded_json();

ALTER TABLE pgq.key_raises
    ADD CONSTRAINT key_raises_payload_bounded CHECK (pgq.json_bounded(payload)) NOT VALID;
ALTER TABLE pgq.job_audit
    ADD CONSTRAINT job_audit_filters_bounded CHECK (pgq.json_bounded(filters)) NOT VALID;
