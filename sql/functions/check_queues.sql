CREATE OR REPLACE FUNCTION pgq.check_queues(queues text[], parents bigint[] DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    allowed text[];
    bad     text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        RETURN;
    END IF;
    SELECT c.queues INTO allowed FROM pgq.caller_scope() c;
    IF allowed IS NULL THEN
        RETURN;
    END IF;
    SELECT coalesce(q.name, 'default') INTO bad FROM unnest(queues) AS q(name)
    WHERE coalesce(q.name, 'default') <> ALL(allowed) LIMIT 1;
    IF bad IS NULL AND cardinality(parents) > 0 THEN
        SELECT 'of job ' || j.id INTO bad FROM pgq.jobs j WHERE j.id = ANY(parents) AND j.queue <> ALL(allowed) LIMIT 1;
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'pgq: % may use only the queues % of its role set, not queue %', session_user,
                        array_to_string(allowed, ', '), bad
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END;
$fn$;

COMMENT ON FUNCTION pgq.check_queues(text[], bigint[]) IS
    'Raise insufficient_privilege unless this session may enqueue into every queue of `queues` (NULL: default) '
    'and depend on every job of `parents` (pgq.caller_scope; revision 0021). Internal: granted to no role.';
