CREATE OR REPLACE FUNCTION pgq.mark_awaited(job_id bigint) RETURNS SETOF pgq.jobs
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH scope AS (
        SELECT c.queues FROM pgq.caller_scope() c WHERE EXISTS (SELECT 1 FROM pgq.role_scopes)
    ),
    marked AS (
        INSERT INTO pgq.awaited_jobs (job_id)
        SELECT j.id FROM pgq.live_jobs j  -- revision 0033: the jobs not finished are there
        WHERE j.id = mark_awaited.job_id AND j.status::text IN ('waiting', 'queued', 'running')
          AND NOT EXISTS (SELECT 1 FROM scope s WHERE s.queues IS NOT NULL AND j.queue <> ALL(s.queues))
        ON CONFLICT DO NOTHING
        RETURNING awaited_jobs.job_id
    )
    -- The row as it is, but for the lease token (revision 0020): a producer may mark any job.
    SELECT r.* FROM pgq.live_jobs j JOIN marked m ON m.job_id = j.id,
        LATERAL jsonb_populate_record(j::pgq.jobs, '{"lease_token": null}'::jsonb) r;
$fn$;

COMMENT ON FUNCTION pgq.mark_awaited(bigint) IS
    'Mark a waiting, queued or running job awaited (Queue.wait): a row of pgq.awaited_jobs, so that '
    'finishing the job notifies channel pgq_finished. Returns the job without its lease token (revision '
    '0020), or no row when it was not marked now.';
