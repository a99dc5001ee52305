-- Revision 0017 down: no sequences. Revision 0014's pgq.enqueue_after and SQL API, revision 0012's
-- release and cancel, revision 0016's settle and claim and revision 0013's explain, as they were (the
-- grants of the enqueue functions and the claim carried back).
--
-- Refused while a job waits on its sequence (an open sequence edge of a waiting job): without the
-- sequence edges' hold, a failed predecessor would release it, or the settle would. Cancel those
-- jobs, or let their sequences drain, then run it again. Finished jobs keep their sequence edges as
-- plain run-on-failure edges; the keys go.
DO $check$
DECLARE
    n bigint;
BEGIN
    SELECT count(DISTINCT d.job_id) INTO n
    FROM pgq.job_dependencies d JOIN pgq.jobs j ON j.id = d.job_id
    WHERE d.parent_outcome IS NULL AND d.sequence_hold IS NOT NULL AND j.status::text = 'waiting';
    IF n > 0 THEN
        RAISE EXCEPTION 'cannot downgrade below revision 0017: % jobs wait on their sequence', n
            USING ERRCODE = 'object_in_use',
                  HINT = 'cancel them (or let their sequences run), then downgrade again';
    END IF;
END
$check$;

CREATE TEMP TABLE pgq_0017_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[], text[], boolean[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text, text, text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text,
                          text);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[], text[], boolean[]);

-- pgq:function enqueue_after@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[], text[]) FROM PUBLIC;

-- pgq:function enqueue@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text) FROM PUBLIC;

-- pgq:function release_children@previous

-- pgq:function settle@previous

-- pgq:function cancel@previous

-- pgq:function explain@previous

-- Revision 0016's claim, without the sequence key in its result.
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
-- pgq:function claim@previous
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;

DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT o.proname, o.grantee FROM pg_temp.pgq_0017_grants o ORDER BY 1, 2 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       (SELECT p.oid::regprocedure FROM pg_proc p
                        WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = g.proname), g.grantee);
    END LOOP;
END;
$grants$;

DROP TABLE pgq.sequence_tails;
ALTER TABLE pgq.job_dependencies DROP COLUMN sequence_hold;
ALTER TABLE pgq.jobs DROP COLUMN sequence_key;
