-- pgq schema, revision 0018: uniqueness variants of a dedupe key (issue 32, part 5).
--
--   unique_for  the key dedupes while a job of it is active (waiting, queued, running) or finished
--               less than unique_for ago: the enqueue answers with that job and adds nothing.
--   replace     (on_conflict 'replace') a job of the key not started yet (queued, scheduled, or
--               waiting behind a running one) gets the enqueue's payload, priority and run_at; a
--               running job is never touched: a new job is added behind it, waiting on it.
--   debounce    replace, with run_at pushed to statement_timestamp() + debounce.
-- The plain dedupe (on_conflict 'ignore', no window) stays pgq.enqueue_many's, unchanged.
--
-- Design:
--   * All variants go through pgq.enqueue_unique, which takes a transaction-level advisory lock per
--     (queue, key) (keys in one global order) before it looks at the key: producers of one key are
--     serialized until they commit, so the last to commit is the last to write (its payload wins),
--     and two producers never both add a job. Workers never take this lock; the only row lock an
--     enqueue takes is the UPDATE of the queued (or waiting) job it replaces, held to the
--     producer's commit: claims skip that row meanwhile (docs/operations.md, threat model).
--   * "Finished less than unique_for ago" reads pgq.jobs through a new partial index on
--     (queue, dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL: no finishing function writes
--     anything more, and unkeyed rows never enter it. A purged job leaves its key's newest finish
--     in pgq.key_finishes: an AFTER DELETE row trigger whose WHEN lets only keyed, finished rows
--     through (the purge of unkeyed rows does no more than before). unique_for is at most 31 days,
--     so a row of pgq.key_finishes older than that can no longer matter: each firing of the trigger
--     also deletes up to 10 of those (index on finished_at), so the purge that adds rows prunes them
--     faster than it adds them, and the table holds the keys purged in the last 31 days.
--   * The job behind a running one is enqueued by pgq.enqueue_after with a run-on-failure edge on
--     the running job (it runs once that job finished, whatever its outcome), then given the key.
--     Waiting, it is outside jobs_dedupe_active_uq; its release to queued happens in the running
--     job's finishing transaction, when that job leaves the index. If the running job finishes (or
--     goes back to queued for a retry) between the look and pgq.enqueue_after, the new job may come
--     out queued next to another active job of the key: the unique violation rolls back that
--     attempt (a subtransaction) and the loop looks at the key again (it replaces that job).
--   * The running job failing or being cancelled does not cancel the job behind it: that job holds
--     the newer input, which still has to be processed.

CREATE INDEX jobs_dedupe_finished_idx ON pgq.jobs (queue, dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL;

CREATE TABLE pgq.key_finishes (
    queue       text NOT NULL,
    dedupe_key  text NOT NULL,
    job_id      bigint NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (queue, dedupe_key)
);
COMMENT ON TABLE pgq.key_finishes IS
    'The newest finish of each dedupe key whose job was deleted (purged): what unique_for reads once '
    'the job is gone (revision 0018). Written only by the trigger jobs_key_finish_trg.';
COMMENT ON COLUMN pgq.key_finishes.queue IS 'Queue of the key.';
COMMENT ON COLUMN pgq.key_finishes.dedupe_key IS 'The dedupe key.';
COMMENT ON COLUMN pgq.key_finishes.job_id IS 'The deleted job (the id unique_for answers with).';
COMMENT ON COLUMN pgq.key_finishes.finished_at IS 'When it finished.';
CREATE INDEX key_finishes_finished_idx ON pgq.key_finishes (finished_at);

-- pgq:function key_finish_keep
REVOKE EXECUTE ON FUNCTION pgq.key_finish_keep() FROM PUBLIC;
CREATE TRIGGER jobs_key_finish_trg AFTER DELETE ON pgq.jobs
FOR EACH ROW WHEN (OLD.dedupe_key IS NOT NULL AND OLD.finished_at IS NOT NULL)
EXECUTE FUNCTION pgq.key_finish_keep();

-- One call per batch of variant jobs: arrays of one element per job. unique_fors, debounces in
-- seconds (NULL: none); replaces: on_conflict 'replace'. Returns (ord, id) per input row.
-- pgq:function enqueue_unique
REVOKE EXECUTE ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                              text[], integer[], text[], double precision[], boolean[],
                                              double precision[]) FROM PUBLIC;

-- A replacement released late must not take a key another job holds meanwhile: revision 0017's
-- pgq.release_children, with that child chained behind the key's job (the step before `ready`).
-- pgq:function release_children

-- The SQL API takes the variants (a new signature is a new function: the old one is dropped, its
-- grants carried to the new one at the end).
CREATE TEMP TABLE pgq_0018_grants ON COMMIT DROP AS
SELECT a.grantee::regrole::text AS grantee
FROM aclexplode((SELECT p.proacl FROM pg_proc p
                 WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, '
                               'bigint[], text, text, text, text)'::regprocedure)) a
WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
  AND a.grantee <> (SELECT p.proowner FROM pg_proc p
                    WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, '
                                  'bigint[], text, text, text, text)'::regprocedure);
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text,
                          text);

-- Revision 0017's body, with unique_for, on_conflict and debounce sent to pgq.enqueue_unique.
-- pgq:function enqueue
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text, text, text, interval, text, interval) FROM PUBLIC;

-- The grants: the SQL API's carried to its successor, and pgq.enqueue_unique to whoever may call
-- pgq.enqueue_many (the producers). No role gets a write on pgq.key_finishes.
DO $grants$
DECLARE
    g text;
BEGIN
    FOR g IN SELECT DISTINCT o.grantee FROM pg_temp.pgq_0018_grants o ORDER BY 1 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, '
                       'integer, bigint[], text, text, text, text, interval, text, interval) TO %s', g);
    END LOOP;
    FOR g IN SELECT DISTINCT a.grantee::regrole::text
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.oid = 'pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                           'text[], bigint[], integer[], text[])'::regprocedure
               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
             ORDER BY 1 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue_unique(text[], jsonb[], text[], smallint[], '
                       'timestamptz[], double precision[], text[], integer[], text[], double precision[], '
                       'boolean[], double precision[]) TO %s', g);
    END LOOP;
END;
$grants$;
