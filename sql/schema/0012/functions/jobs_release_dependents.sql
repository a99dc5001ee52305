CREATE OR REPLACE FUNCTION pgq.jobs_release_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    parents bigint[];
BEGIN
    parents := string_to_array(rtrim(coalesce(current_setting('pgq.finished_parents', true), ''), ','), ',')::bigint[];
    IF coalesce(cardinality(parents), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgq.finished_parents', '', true);
    PERFORM pgq.release_children(parents);
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.jobs_release_dependents() IS
    'Trigger of pgq.jobs: the jobs with dependents that a statement finishes (noted by '
    'jobs_collect_finished) release their children (count themselves off their pending_parents) or '
    'cancel those that needed them to succeed; the first call of the statement does it for all, '
    'locking up front, in id order, every waiting job a cascade of cancellations can reach.';
