CREATE OR REPLACE FUNCTION pgq.key_raised(p_queue text, p_dedupe_key text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT max(r.watermark) FROM pgq.key_raises r WHERE r.queue = p_queue AND r.dedupe_key = p_dedupe_key
$fn$;

COMMENT ON FUNCTION pgq.key_raised(text, text) IS
    'The highest watermark raised for a dedupe key and not applied yet (pgq.key_raises); NULL if none. '
    'Internal: granted to no role.';
