-- pgq schema, revision 0017: sequences. Jobs with the same sequence key in a queue run one at a
-- time, in enqueue order, across all workers.
--
-- A sequence is an implicit dependency chain, built on the workflow edges of revision 0007: the
-- enqueue of a job with a sequence key makes it depend on the key's tail (the job of that key
-- enqueued last), through an edge of pgq.job_dependencies marked as a sequence edge
-- (sequence_hold not NULL). The claim never decides by a key: a sequenced job is `waiting` until its
-- predecessor finished, then `queued` like any other, so the claim and the plain INSERTs of
-- sql/job_insert*.sql do no more work than before (sequenced jobs go through pgq.enqueue_after).
-- The claim only returns the key with each job it takes (for the handler's pgq.current_job()).
--
-- The tail of each (queue, key) is a row of pgq.sequence_tails, upserted by the enqueue: its row
-- lock serializes the producers of one key (two producers of different keys never meet), and no
-- worker ever touches the table. A batch locks its keys in one global order (queue, key), so
-- producers cannot deadlock on them; jobs of one key in one batch are chained in input order. The
-- batch takes its ids after those locks, so each key's chain follows id order.
--
-- How a predecessor's finish moves the sequence (pgq.release_children):
--   succeeded, cancelled      the next job is released (an operator's cancel moves the sequence on);
--   failed, sequence_hold     the edge stays open: the next job waits, held, until the failed job
--                             is retried (and succeeds) or cancelled (pgq.cancel now takes a failed
--                             job that holds a sequence);
--   failed, not sequence_hold the job was enqueued with sequence_on_failure 'continue': released.
-- pgq.settle leaves held edges alone. pgq.explain says 'sequence_held' (the HOOK(sequences) of
-- revision 0013), and now also tells revision 0014's full group limits.

ALTER TABLE pgq.jobs ADD COLUMN sequence_key text;
COMMENT ON COLUMN pgq.jobs.sequence_key IS
    'The job''s sequence (revision 0017): jobs with the same key in a queue run one at a time, in '
    'enqueue order. NULL: none.';

ALTER TABLE pgq.job_dependencies ADD COLUMN sequence_hold boolean;
COMMENT ON COLUMN pgq.job_dependencies.sequence_hold IS
    'NULL: an edge of depends_on. Otherwise a sequence edge (the child is the next job of the parent''s '
    'sequence): true, the parent failing for good holds the child (the edge stays open until the parent '
    'is retried and succeeds, or is cancelled); false (sequence_on_failure ''continue''), it releases it.';

CREATE TABLE pgq.sequence_tails (
    queue        text NOT NULL,
    sequence_key text NOT NULL,
    job_id       bigint,
    hold         boolean NOT NULL DEFAULT true,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, sequence_key)
);
COMMENT ON TABLE pgq.sequence_tails IS
    'The last job enqueued of each sequence (queue, sequence_key): the job the next one of the key '
    'depends on. Written only by pgq.enqueue_after, under the row lock that serializes the key''s '
    'producers; workers never touch it.';
COMMENT ON COLUMN pgq.sequence_tails.queue IS 'Queue of the sequence.';
COMMENT ON COLUMN pgq.sequence_tails.sequence_key IS 'Sequence key.';
COMMENT ON COLUMN pgq.sequence_tails.job_id IS 'The sequence''s last enqueued job (pgq.jobs.id; NULL only while its first enqueue runs).';
COMMENT ON COLUMN pgq.sequence_tails.hold IS
    'Whether that job failing for good holds the sequence (false: enqueued with sequence_on_failure ''continue'').';
COMMENT ON COLUMN pgq.sequence_tails.updated_at IS 'When the tail last changed.';

-- pgq.enqueue_after and pgq.enqueue take the sequence keys, and pgq.claim returns them (a new
-- signature or result is a new function: the old ones are dropped, their grants carried to the new
-- ones at the end).
CREATE TEMP TABLE pgq_0017_grants ON COMMIT DROP AS
SELECT p.proname::text AS proname, a.grantee::regrole::text AS grantee
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], '
                'integer[], boolean[], integer[], bigint[], text[])'::regprocedure,
                'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, '
                'text)'::regprocedure,
                'pgq.claim(text[], text[], integer, double precision, text)'::regprocedure)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], integer[],
                                boolean[], integer[], bigint[], text[]);

-- Revision 0014's body, with the sequence edges added to the given ones: sequence_keys[i] is job i's
-- key (NULL: none), sequence_continue[i] whether its failure lets its sequence move on.
-- pgq:function enqueue_after
REVOKE EXECUTE ON FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                             integer[], boolean[], integer[], bigint[], text[], text[], boolean[])
    FROM PUBLIC;

-- The SQL API gains sequence_key and sequence_on_failure (at the end, with defaults: existing calls
-- keep working). A job with a sequence key goes through pgq.enqueue_after, like one with depends_on.
-- pgq:function enqueue
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text,
                                       text, text, text) FROM PUBLIC;

-- Revision 0012's release, with held sequence edges left open: a failed parent does not mark (nor
-- count off) an edge with sequence_hold; its retry's success or its cancel will.
-- pgq:function release_children

-- Revision 0016's settle, which leaves the held sequence edges alone: a failed parent with only held
-- edges open has nothing to settle (it would otherwise come back every second, and take the place
-- of parents that do).
-- pgq:function settle

-- Revision 0012's cancel, which also takes a failed job that holds its sequence (an open held edge):
-- cancelling it is how an operator lets the sequence move on without running it again.
-- pgq:function cancel

-- pgq.explain (revision 0013) says 'sequence_held' for a job waiting on its sequence predecessor
-- (held by job N: running, queued, waiting, or failed and holding), where its HOOK(sequences) was left;
-- waiting_for_parents names the other parents only. It also tells the group limits of revision 0014
-- (pgq.group_limits): a grouped job whose group has max_running jobs of its kind running
-- ('group_concurrency_limit_full', with the jobs holding it) or max_starts starts in its window
-- ('group_rate_limit_full', until when), counted as the claim counts them; without these, such a job
-- was called 'ready'.
-- pgq:function explain

-- The claim returns each job's sequence key too, so that a handler's job (pgq.current_job()) has it:
-- revision 0016's body with one more output column (a new result type: dropped and created again,
-- its grants carried below). It reads the key from the row the UPDATE writes anyway; the claim of
-- plain jobs returns one more NULL per row and does no other work.
DROP FUNCTION pgq.claim(text[], text[], integer, double precision, text);
-- pgq:function claim
REVOKE EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) FROM PUBLIC;

-- The replaced functions' EXECUTE grants go to their successors (the roles script grants the new
-- signatures from now on). No role gets a write on pgq.sequence_tails nor INSERT (sequence_key) on
-- pgq.jobs: a sequenced job is enqueued by pgq.enqueue_after alone, which chains it.
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT o.proname, o.grantee FROM pg_temp.pgq_0017_grants o ORDER BY 1, 2 LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
                       (SELECT p.oid::regprocedure FROM pg_proc p
                        WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = g.proname), g.grantee);
    END LOOP;
END;
$grants$;
