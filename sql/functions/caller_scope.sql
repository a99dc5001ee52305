CREATE OR REPLACE FUNCTION pgq.caller_scope(OUT prefix text, OUT queues text[])
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- pgq's owner (the admin role) and its members, superusers included, are never scoped.
    IF pg_has_role(session_user, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'pgq'), 'MEMBER') THEN
        RETURN;
    END IF;
    WITH mine AS (
        SELECT s.prefix, s.queues
        FROM pgq.role_scopes s JOIN pg_roles r ON r.rolname = s.producer
        WHERE pg_has_role(session_user, r.oid, 'MEMBER')
    )
    SELECT (SELECT min(m.prefix) FROM mine m),
           CASE WHEN EXISTS (SELECT 1 FROM mine) THEN
               ARRAY(SELECT DISTINCT q.name FROM mine m, unnest(m.queues) AS q(name)
                     WHERE NOT EXISTS (SELECT 1 FROM mine o WHERE q.name <> ALL(o.queues))
                     ORDER BY q.name)
           END
    INTO prefix, queues;
END;
$fn$;

COMMENT ON FUNCTION pgq.caller_scope() IS
    'The scoped role set of this session''s login (session_user): its prefix and queues (the queues common to '
    'all its sets); NULLs when it is in none, or a member of pgq''s owner (revision 0021).';
