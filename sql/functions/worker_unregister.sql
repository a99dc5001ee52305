CREATE OR REPLACE FUNCTION pgq.worker_unregister(p_id uuid, p_token uuid)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH gone AS (DELETE FROM pgq.workers w WHERE w.id = p_id AND w.token = p_token RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$fn$;

COMMENT ON FUNCTION pgq.worker_unregister(uuid, uuid) IS
    'Delete the worker row with this id and token (a clean stop); false if none.';
