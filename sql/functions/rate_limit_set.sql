CREATE OR REPLACE FUNCTION pgq.rate_limit_set(p_kind text, p_max_starts integer, p_per_s double precision)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    created boolean;
BEGIN
    IF p_kind IS NULL OR p_kind = '' OR p_max_starts IS NULL OR p_max_starts < 1
            OR NOT (p_per_s > 0 AND p_per_s <= 86400) THEN
        RAISE EXCEPTION 'pgq.rate_limit_set: need a non-empty kind, max_starts >= 1 and a window of (0, 86400] '
                        's, got %, % and %', coalesce(quote_literal(p_kind), 'NULL'),
                        coalesce(p_max_starts::text, 'NULL'), coalesce(p_per_s::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgq.rate_limits AS r (kind, max_starts, per_s)
    VALUES (p_kind, p_max_starts, p_per_s)
    ON CONFLICT (kind) DO UPDATE SET max_starts = excluded.max_starts, per_s = excluded.per_s, updated_at = now()
    RETURNING (r.xmax = 0) INTO created;
    RETURN created;
END;
$fn$;

COMMENT ON FUNCTION pgq.rate_limit_set(text, integer, double precision) IS
    'Set the rate limit of a kind: at most max_starts starts in any per_s-second window (revision 0020: a '
    'worker''s only way to write it). Returns whether the kind had no such limit before.';
