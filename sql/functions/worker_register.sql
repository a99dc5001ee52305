CREATE OR REPLACE FUNCTION pgq.worker_register(p_claimed_by text, p_host text, p_pid integer, p_queues text[],
                                    p_kinds text[], p_slots integer, p_lease_s double precision,
                                    p_refresh_s double precision, p_version text)
RETURNS TABLE (id uuid, token uuid)
LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO pgq.workers AS w (claimed_by, host, pid, queues, kinds, slots, lease_s, refresh_s, version)
    VALUES (p_claimed_by, p_host, p_pid, p_queues, coalesce(p_kinds, '{}'), p_slots, p_lease_s, p_refresh_s,
            p_version)
    RETURNING w.id, w.token
$fn$;

COMMENT ON FUNCTION pgq.worker_register(text, text, integer, text[], text[], integer, double precision,
                                        double precision, text) IS
    'Add a worker to pgq.workers; returns its id and the secret token its later calls present.';
