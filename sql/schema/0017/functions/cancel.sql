CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    IF NOT FOUND THEN
        RETURN QUERY
        UPDATE pgq.jobs j SET status = 'cancelled'
        WHERE j.id = cancel.job_id AND j.status = 'failed'
          AND EXISTS (SELECT 1 FROM pgq.job_dependencies d
                      WHERE d.parent_id = j.id AND d.parent_outcome IS NULL AND d.sequence_hold)
        RETURNING j.*;
    END IF;
    PERFORM pgq.after_finish(ARRAY[job_id]);
END;
$fn$;

COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel), or a failed job '
    'that holds its sequence (which then moves on); its dependents that needed it to succeed are '
    'cancelled too, and its waiters told. Returns the job if cancelled.';
