-- Reverts revision 0002: enqueue runs with the caller's rights again and is executable by PUBLIC.
DROP TRIGGER IF EXISTS jobs_guard_admin_transition ON pgq.jobs;
DROP FUNCTION IF EXISTS pgq.jobs_guard_admin_transition();
GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[],
                                           double precision[], text[], bigint[], integer[]) TO PUBLIC;
ALTER FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                text[], bigint[], integer[])
    SECURITY INVOKER RESET search_path;
