CREATE OR REPLACE FUNCTION pgq.leases_lost(p_ids bigint[], p_tokens uuid[])
RETURNS TABLE(id bigint, cancelled boolean)
LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    -- Revision 0033: a lease is held only by a live job (pgq.live_jobs, where every running one
    -- is); the finished jobs are looked up for a lease lost, to say whether it was a cancellation.
    SELECT h.id,
           j.id IS NULL AND EXISTS (SELECT 1 FROM pgq.finished_jobs f WHERE f.id = h.id AND f.status = 'cancelled')
    FROM unnest(p_ids, p_tokens) AS h(id, token)
    LEFT JOIN pgq.live_jobs j ON j.id = h.id
    WHERE j.lease_token IS DISTINCT FROM h.token
$fn$;

COMMENT ON FUNCTION pgq.leases_lost(bigint[], uuid[]) IS
    'Which of the given attempts (job id, lease token) no longer hold their lease, and whether because the '
    'job was cancelled (revision 0020): a worker''s lease check without reading pgq.jobs.lease_token, '
    'which no role but the admin may read.';
