CREATE OR REPLACE FUNCTION pgq.limits_changed(kind_name text) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH want AS (
        SELECT EXISTS (SELECT 1 FROM pgq.concurrency_limits c WHERE c.kind = kind_name)
            OR EXISTS (SELECT 1 FROM pgq.rate_limits r WHERE r.kind = kind_name) AS limited
    ),
    changed AS (
        UPDATE pgq.jobs j SET limited = w.limited
        FROM want w
        WHERE j.id = ANY(ARRAY(SELECT x.id FROM pgq.jobs x, want v
                               WHERE x.kind = kind_name AND x.status::text IN ('waiting', 'queued')
                                 AND x.limited <> v.limited AND x.group_key IS NULL
                               ORDER BY x.id
                               FOR NO KEY UPDATE OF x SKIP LOCKED))
        RETURNING j.id
    )
    SELECT count(*) FROM changed;
$fn$;

COMMENT ON FUNCTION pgq.limits_changed(text) IS
    'Mark the queued and waiting jobs of a kind limited or not, as its limits now say; returns how many '
    'changed. Run by the statements that set and remove limits. Needs pgq_worker.';
