CREATE OR REPLACE FUNCTION pgq.worker_seen(p_id uuid, p_token uuid, p_state text)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH seen AS (
        UPDATE pgq.workers w SET last_seen = now(), state = coalesce(p_state, w.state)
        WHERE w.id = p_id AND w.token = p_token
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM seen)
$fn$;

COMMENT ON FUNCTION pgq.worker_seen(uuid, uuid, text) IS
    'Refresh last_seen (and state, unless NULL) of the worker row with this id and token; false if none.';
