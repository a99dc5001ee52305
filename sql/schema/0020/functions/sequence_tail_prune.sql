CREATE OR REPLACE FUNCTION pgq.sequence_tail_prune() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    DELETE FROM pgq.sequence_tails t
    WHERE t.ctid = ANY(ARRAY(SELECT o.ctid FROM pgq.sequence_tails o
                             WHERE o.queue = OLD.queue AND o.sequence_key = OLD.sequence_key
                               AND o.job_id = OLD.id
                             FOR UPDATE SKIP LOCKED));
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.sequence_tail_prune() IS
    'Trigger of pgq.jobs (AFTER DELETE, rows with a sequence key only): deletes the key''s tail when it '
    'names the deleted job, unless a producer holds it (revision 0020).';
