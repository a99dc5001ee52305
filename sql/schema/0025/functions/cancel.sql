CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint, actor text DEFAULT NULL) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    done boolean;
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    done := FOUND;
    IF NOT done THEN
        RETURN QUERY
        UPDATE pgq.jobs j SET status = 'cancelled'
        WHERE j.id = cancel.job_id AND j.status = 'failed'
          AND EXISTS (SELECT 1 FROM pgq.job_dependencies d
                      WHERE d.parent_id = j.id AND d.parent_outcome IS NULL AND d.sequence_hold)
        RETURNING j.*;
        done := FOUND;
    END IF;
    PERFORM pgq.after_finish(ARRAY[job_id]);
    IF done THEN
        -- Revision 0025: every cancel is audited, from SQL too. db_role takes its default
        -- (session_user): the caller names the actor, the database says who it is.
        INSERT INTO pgq.job_audit (action, actor, job_ids)
        VALUES ('cancel', nullif(cancel.actor, ''), ARRAY[cancel.job_id]);
    END IF;
END;
$fn$;

COMMENT ON FUNCTION pgq.cancel(bigint, text) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel), or a failed job '
    'that holds its sequence (which then moves on); its dependents that needed it to succeed are '
    'cancelled too, and its waiters told. Returns the job if cancelled, and then records it in '
    'pgq.job_audit: `actor` as who asked (NULL: not named), the session''s role as db_role.';
