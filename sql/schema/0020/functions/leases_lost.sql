CREATE OR REPLACE FUNCTION pgq.leases_lost(p_ids bigint[], p_tokens uuid[])
RETURNS TABLE(id bigint, cancelled boolean)
LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT h.id, coalesce(j.status::text = 'cancelled', false)
    FROM unnest(p_ids, p_tokens) AS h(id, token)
    LEFT JOIN pgq.jobs j ON j.id = h.id
    WHERE j.lease_token IS DISTINCT FROM h.token
$fn$;

COMMENT ON FUNCTION pgq.leases_lost(bigint[], uuid[]) IS
    'Which of the given attempts (job id, lease token) no longer hold their lease, and whether because the '
    'job was cancelled (revision 0020): a worker''s lease check without reading pgq.jobs.lease_token, '
    'which no role but the admin may read.';
