CREATE OR REPLACE FUNCTION pgq.claim_group_heads(wanted text[], kind_name text, key text, prio smallint, n integer,
                                       skip bigint[], salt text)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- as pgq.claim's: its ORDER BY names the index
AS $fn$
BEGIN
    IF key IS NULL THEN
        RETURN ARRAY(
            SELECT y.id
            FROM unnest(wanted) AS w(name)
            CROSS JOIN LATERAL (
                SELECT c.id, c.priority, c.run_at
                FROM (SELECT j.id, j.priority, j.run_at, j.attempts FROM pgq.jobs j
                      WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = kind_name
                        AND j.group_key IS NULL AND j.priority = prio AND j.run_at <= now()
                      -- jobs_claim_group_idx's order (the key and priority are fixed): the way in is
                      -- that index, never jobs_claim_limited_idx filtering the kind's other groups.
                      ORDER BY j.group_key, j.priority, j.run_at, j.id
                      OFFSET 0) c  -- keeps the reservation below out of the scan's filter
                WHERE c.id <> ALL(skip) AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
                LIMIT n) y
            ORDER BY y.priority, y.run_at, y.id
            LIMIT n);
    END IF;
    RETURN ARRAY(
        SELECT y.id
        FROM unnest(wanted) AS w(name)
        CROSS JOIN LATERAL (
            SELECT c.id, c.priority, c.run_at
            FROM (SELECT j.id, j.priority, j.run_at, j.attempts FROM pgq.jobs j
                  WHERE j.status = 'queued' AND j.limited AND j.queue = w.name AND j.kind = kind_name
                    AND j.group_key = key AND j.priority = prio AND j.run_at <= now()
                  ORDER BY j.group_key, j.priority, j.run_at, j.id
                  OFFSET 0) c
            WHERE c.id <> ALL(skip) AND pg_try_advisory_xact_lock(pgq.claim_key(salt, c.id, c.attempts, c.run_at))
            LIMIT n) y
        ORDER BY y.priority, y.run_at, y.id
        LIMIT n);
END;
$fn$;

COMMENT ON FUNCTION pgq.claim_group_heads(text[], text, text, smallint, integer, bigint[], text) IS
    'Reserve up to n head jobs of one group of a kind for pgq.claim (its walk over groups) under the '
    'claim''s keys (pgq.claim_key with its salt); returns their ids. Internal: granted to no role.';
