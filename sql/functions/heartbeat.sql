CREATE OR REPLACE FUNCTION pgq.heartbeat(p_ids bigint[], p_tokens uuid[], p_lease_s double precision[], p_progress jsonb[],
                              p_lock_timeout text)
RETURNS TABLE (id bigint, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH locked AS (
        -- In id order, as every statement that locks several jobs does (revision 0033: on the small
        -- live table the UPDATE alone may be planned as a hash join over a scan in physical order).
        -- Revision 0034: only the rows under a lease the caller holds, a token it sent. A lease lost
        -- (rescued, claimed again by another worker) is not its row to lock, nor to wait for. A claim
        -- draws its token and only its worker knows it, so this is the caller's rows; the UPDATE below
        -- still renews a row only under the token sent for it. (A join matching each row here to the
        -- token sent for it added about three times as many instructions to a heartbeat as this test.)
        SELECT j.id
        FROM pgq.live_jobs j
        WHERE j.id = ANY(p_ids) AND j.lease_token = ANY(p_tokens)
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    )
    UPDATE pgq.live_jobs j
    SET lease_expires_at = now() + make_interval(secs => h.lease_s),
        progress = coalesce(h.progress, j.progress)
    FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
          WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
          ORDER BY u.id) h
    WHERE j.id = ANY(p_ids) AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.lease_expires_at;
END;
$fn$;

COMMENT ON FUNCTION pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text) IS
    'Renew leases under their tokens (sql/job_heartbeat.sql): (id, new expiry) per lease still held.';
