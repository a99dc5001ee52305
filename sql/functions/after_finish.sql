CREATE OR REPLACE FUNCTION pgq.after_finish(finished bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    told bigint;
BEGIN
    IF coalesce(cardinality(finished), 0) = 0 THEN
        RETURN;
    END IF;
    -- Two probes of small indexes (open edges, waits), each driven by the ids: most batches stop here.
    IF EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = ANY(finished) AND d.parent_outcome IS NULL) THEN
        finished := finished || pgq.release_children(finished);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgq.awaited_jobs a WHERE a.job_id = ANY(finished)) THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM pgq.awaited_jobs a
        WHERE a.job_id = ANY(finished)
          AND EXISTS (SELECT 1 FROM pgq.jobs j
                      WHERE j.id = a.job_id AND j.status IN ('succeeded', 'failed', 'cancelled'))
        RETURNING a.job_id
    )
    SELECT count(pg_notify('pgq_finished', g.job_id::text)) INTO told FROM gone g;
END;
$fn$;

COMMENT ON FUNCTION pgq.after_finish(bigint[]) IS
    'Release the children and notify the waiters (pgq.awaited_jobs) of the finished jobs among the '
    'given ids; what every function that finishes jobs runs last.';
