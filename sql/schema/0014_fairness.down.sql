-- Reverts revision 0014: no group keys, group limits nor fair walk; revision 0010's claim and enqueue_many,
-- revision 0012's enqueue_after and revision 0007's SQL API, as they were (their grants carried back).
CREATE TEMP TABLE pgq_0014_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], '
                'bigint[], integer[], text[])'::regprocedure,
                'pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text);
DROP FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], bigint[],
                               integer[], text[]);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[]);
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
DROP FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[]);
DROP TABLE pgq.group_rate_starts;
DROP TABLE pgq.group_limits;
DROP INDEX pgq.jobs_running_group_idx;
DROP INDEX pgq.jobs_claim_group_idx;
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_group_key_limited;
ALTER TABLE pgq.jobs DROP COLUMN group_key;

-- pgq:function enqueue_many@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                            text[], bigint[], integer[]) FROM PUBLIC;

-- pgq:function enqueue_after@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[]) FROM PUBLIC;

-- pgq:function enqueue@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text)
    FROM PUBLIC;

-- pgq:function claim@previous
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;

-- Mark or unmark the queued and waiting jobs of a kind after its limits changed (called by the
-- statements that set and remove limits). Rows another transaction holds are skipped: the claim
-- corrects any row it meets (see above).
-- pgq:function limits_changed@previous
REVOKE EXECUTE ON FUNCTION pgq.limits_changed(text) FROM PUBLIC;

DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT o.proname, o.grantee FROM pg_temp.pgq_0014_grants o ORDER BY 1, 2 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       (SELECT p.oid::regprocedure FROM pg_proc p
                        WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = g.proname), g.grantee);
    END LOOP;
END;
$grants$;
