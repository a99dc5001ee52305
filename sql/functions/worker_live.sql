CREATE OR REPLACE FUNCTION pgq.worker_live(last_seen timestamptz, refresh_s double precision)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$ SELECT last_seen > now() - make_interval(secs => 3 * refresh_s) $fn$;

COMMENT ON FUNCTION pgq.worker_live(timestamptz, double precision) IS
    'Whether a pgq.workers row (its last_seen and refresh_s) belongs to a live worker.';
