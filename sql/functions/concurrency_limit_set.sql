CREATE OR REPLACE FUNCTION pgq.concurrency_limit_set(p_kind text, p_max_running integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    created boolean;
BEGIN
    IF p_kind IS NULL OR p_kind = '' OR p_max_running IS NULL OR p_max_running < 1 THEN
        RAISE EXCEPTION 'pgq.concurrency_limit_set: need a non-empty kind and a max_running >= 1, got % and %',
                        coalesce(quote_literal(p_kind), 'NULL'), coalesce(p_max_running::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgq.concurrency_limits AS c (kind, max_running)
    VALUES (p_kind, p_max_running)
    ON CONFLICT (kind) DO UPDATE SET max_running = excluded.max_running, updated_at = now()
    RETURNING (c.xmax = 0) INTO created;
    RETURN created;
END;
$fn$;

COMMENT ON FUNCTION pgq.concurrency_limit_set(text, integer) IS
    'Set the running-jobs limit of a kind (revision 0020: a worker''s only way to write it). Returns whether '
    'the kind had no such limit before (its jobs are then marked by pgq.limits_changed).';
