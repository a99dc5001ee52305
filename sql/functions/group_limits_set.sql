CREATE OR REPLACE FUNCTION pgq.group_limits_set(p_kind text, p_max_running integer, p_max_starts integer,
                                     p_per_s double precision)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_kind IS NULL OR p_kind = '' OR p_max_running < 1 OR p_max_starts < 1
            OR (p_max_starts IS NULL) <> (p_per_s IS NULL) OR NOT (p_per_s > 0 AND p_per_s <= 86400) THEN
        RAISE EXCEPTION 'pgq.group_limits_set: need a non-empty kind, max_running >= 1 or NULL, and max_starts '
                        '>= 1 with a window of (0, 86400] s, or both NULL; got %, %, % and %',
                        coalesce(quote_literal(p_kind), 'NULL'), coalesce(p_max_running::text, 'NULL'),
                        coalesce(p_max_starts::text, 'NULL'), coalesce(p_per_s::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgq.group_limits AS g (kind, max_running, max_starts, per_s)
    VALUES (p_kind, p_max_running, p_max_starts, p_per_s)
    ON CONFLICT (kind) DO UPDATE
    SET max_running = excluded.max_running, max_starts = excluded.max_starts, per_s = excluded.per_s,
        updated_at = now();
END;
$fn$;

COMMENT ON FUNCTION pgq.group_limits_set(text, integer, integer, double precision) IS
    'Set the per-group limits of a kind (NULL: no such limit; revision 0020: a worker''s only way to write '
    'them). The claim''s turn_after stays as it is.';
