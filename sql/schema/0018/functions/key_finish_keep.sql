CREATE OR REPLACE FUNCTION pgq.key_finish_keep() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    INSERT INTO pgq.key_finishes AS f (queue, dedupe_key, job_id, finished_at)
    VALUES (OLD.queue, OLD.dedupe_key, OLD.id, OLD.finished_at)
    ON CONFLICT (queue, dedupe_key) DO UPDATE
    SET job_id = EXCLUDED.job_id, finished_at = EXCLUDED.finished_at
    WHERE f.finished_at < EXCLUDED.finished_at;
    -- Rows past the longest unique_for (31 days) no longer matter: a few per firing, so that
    -- the purge bounds the table.
    DELETE FROM pgq.key_finishes f
    WHERE (f.queue, f.dedupe_key) IN (SELECT o.queue, o.dedupe_key FROM pgq.key_finishes o
                                      WHERE o.finished_at < statement_timestamp() - interval '31 days'
                                      ORDER BY o.finished_at LIMIT 10
                                      FOR UPDATE SKIP LOCKED);
    RETURN NULL;
END;
$fn$;

COMMENT ON FUNCTION pgq.key_finish_keep() IS
    'Trigger of pgq.jobs (AFTER DELETE, keyed finished rows only): keeps the key''s newest finish in '
    'pgq.key_finishes, for unique_for, and deletes up to 10 rows older than 31 days (the longest unique_for; '
    'revision 0018).';
