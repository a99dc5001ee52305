CREATE OR REPLACE FUNCTION pgq.worker_prune()
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH stale AS (
        SELECT w.id FROM pgq.workers w
        WHERE w.last_seen < now() - make_interval(secs => 3 * greatest(w.lease_s, w.refresh_s))
        ORDER BY w.id
        FOR UPDATE SKIP LOCKED
    ),
    gone AS (DELETE FROM pgq.workers w USING stale s WHERE w.id = s.id RETURNING 1)
    SELECT count(*)::integer FROM gone
$fn$;

COMMENT ON FUNCTION pgq.worker_prune() IS
    'Delete the rows of pgq.workers not refreshed for three leases; returns how many.';
