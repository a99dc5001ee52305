CREATE OR REPLACE FUNCTION pgq.jobs_collect_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM set_config('pgq.finished_parents',
                       coalesce(current_setting('pgq.finished_parents', true), '') || NEW.id::text || ',', true);
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_collect_finished() IS
    'Trigger of pgq.jobs (after update, each row): notes a job with dependents that this statement '
    'finishes in the setting pgq.finished_parents, which the statement trigger jobs_release_dependents '
    'then handles in one go.';
