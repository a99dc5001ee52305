CREATE OR REPLACE FUNCTION pgq.cancel(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN QUERY SELECT * FROM pgq.cancel_core(job_id);
    PERFORM pgq.after_finish(ARRAY[job_id]);
END;
$fn$;

COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'Cancel a waiting, queued or running job (its worker is told through pgq_cancel); its dependents '
    'that needed it to succeed are cancelled too, and its waiters told. Returns the job if cancelled.';
