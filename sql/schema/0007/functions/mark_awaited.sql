CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE pgq.jobs j
    SET awaited = true
    WHERE j.id = job_id AND j.status::text IN ('waiting', 'queued', 'running') AND j.awaited IS NOT TRUE
    RETURNING j.*;
$fn$;

COMMENT ON FUNCTION pgq.mark_awaited(bigint) IS
    'Mark a queued or running job awaited (Queue.wait): finishing it then notifies channel '
    'pgq_finished. Returns the job, or no row when it was not marked now.';
