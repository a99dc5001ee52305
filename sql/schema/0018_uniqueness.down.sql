-- Revision 0018 down: no uniqueness variants. Revision 0017's SQL API as it was (its grants carried
-- back); pgq.enqueue_unique, pgq.key_finishes, its trigger and the finished-key index go. Jobs
-- enqueued with a variant stay as they are (a waiting job behind a running one keeps its edge).

CREATE TEMP TABLE pgq_0018_grants ON COMMIT DROP AS
SELECT a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, '
              'text, text, interval, text, interval)'::regprocedure
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text,
                          text, interval, text, interval);
DROP FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[],
                                 integer[], text[], double precision[], boolean[], double precision[]);
DROP TRIGGER jobs_key_finish_trg ON pgq.jobs;
DROP FUNCTION pgq.key_finish_keep();
DROP TABLE pgq.key_finishes;
DROP INDEX pgq.jobs_dedupe_finished_idx;

-- Revision 0017's SQL API, verbatim.
-- pgq:function enqueue@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text, text, text) FROM PUBLIC;

DO $grants$
DECLARE
    g text;
BEGIN
    FOR g IN SELECT DISTINCT o.grantee FROM pg_temp.pgq_0018_grants o ORDER BY 1 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, '
                       'integer, bigint[], text, text, text, text) TO %s', g);
    END LOOP;
END;
$grants$;

-- Revision 0017's pgq.release_children.
-- pgq:function release_children@previous
