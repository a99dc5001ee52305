-- pgq schema, revision 0016: a keyed enqueue locks no existing job (issue 30).
--
-- Until now pgq.enqueue_many with dedupe keys wrote the active job of each key, inside the caller's
-- transaction: `ON CONFLICT ... DO UPDATE SET input_watermark = greatest(...)` row-locked it, and
-- with watermarks a `FOR UPDATE` of those jobs came first. A producer that sat in its transaction
-- held the job until it ended: claims skipped it, its worker's acknowledgements and heartbeats came
-- back busy, an admin's cancel waited. Any producer may read pgq.jobs, so a hostile one could hold
-- every keyed job.
--
-- Now a keyed enqueue only inserts:
--   * `ON CONFLICT ... DO NOTHING` (which locks nothing it conflicts with), then a following
--     statement (a newer snapshot) looks up the active job of each key that conflicted; a key whose
--     job finished in between is inserted again (a bounded loop). Keys still go in one global order.
--   * A watermark above the active job's input_watermark becomes a row of pgq.key_raises (the key,
--     the watermark, the job it was meant for, and the enqueue's own job columns), not an update of
--     the job. The answer is the active job, as before.
--   * A watermark insert that a finishing run covered after the insert statement's snapshot (that
--     run's acknowledgement committed while the insert looked for a conflict) is taken back in the
--     next statement, which sees pgq.key_watermarks as it is now: the job the enqueue inserted is
--     its own, uncommitted, so deleting it touches nobody's row. This replaces the FOR UPDATE that
--     made the enqueue wait for such an acknowledgement.
--
-- Who applies a raise:
--   * the completion (pgq.complete_core, complete_skip_core): a keyed job's effective input
--     watermark is greatest(input_watermark, the raises of its key it can see); above the watermark
--     the run processed, the job is queued again (the dirty re-run) carrying it. One probe of
--     key_raises_key_idx per keyed row; an unkeyed row does not reach it (a CASE branch).
--   * pgq.settle (every worker, each second, one at a time), through pgq.settle_raises: deletes
--     the raises a successful run covered (done_watermark), folds the others into the key's active
--     job (queued or running; short row locks of its own, SKIP LOCKED), and for a key with no active
--     job does what the enqueue would have done after the job finished: a new job, with the
--     enqueue's columns and the highest raised watermark, unless a run covered it. A raise meant for
--     a job that failed or was cancelled for good is dropped if it was written before that finish
--     (as the old lock made that finish wait for the enqueue and fail the raised job), and runs
--     otherwise.
-- A raise committed after its job's completion (the completion could not see it) so runs about a
-- second later, as a new job, instead of making the enqueue wait for that completion.

CREATE TABLE pgq.key_raises (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text NOT NULL,
    dedupe_key   text NOT NULL,
    watermark    bigint NOT NULL,
    job_id       bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    priority     smallint NOT NULL,
    run_at       timestamptz NOT NULL,
    max_attempts integer NOT NULL,
    group_key    text
);
-- The completion's probe (the highest raise of a key) and the settle's walk over keys.
CREATE INDEX key_raises_key_idx ON pgq.key_raises (queue, dedupe_key, watermark);
COMMENT ON TABLE pgq.key_raises IS
    'Watermarks enqueued for a dedupe key while a job of the key was active, not yet applied to it: '
    'insert-only for producers (pgq.enqueue_many), applied by completions and pgq.settle (revision 0016).';
COMMENT ON COLUMN pgq.key_raises.id IS 'Order of the raises.';
COMMENT ON COLUMN pgq.key_raises.queue IS 'Queue of the key.';
COMMENT ON COLUMN pgq.key_raises.dedupe_key IS 'The dedupe key.';
COMMENT ON COLUMN pgq.key_raises.watermark IS 'The watermark enqueued.';
COMMENT ON COLUMN pgq.key_raises.job_id IS 'The active job the enqueue found (and answered with).';
COMMENT ON COLUMN pgq.key_raises.at IS 'When the raise was written (database clock).';
COMMENT ON COLUMN pgq.key_raises.kind IS 'The enqueue''s kind: of the job the settle inserts if the key''s job finished.';
COMMENT ON COLUMN pgq.key_raises.payload IS 'The enqueue''s payload (likewise).';
COMMENT ON COLUMN pgq.key_raises.priority IS 'The enqueue''s priority (likewise).';
COMMENT ON COLUMN pgq.key_raises.run_at IS 'The enqueue''s run_at (likewise).';
COMMENT ON COLUMN pgq.key_raises.max_attempts IS 'The enqueue''s max_attempts (likewise).';
COMMENT ON COLUMN pgq.key_raises.group_key IS 'The enqueue''s group key (likewise).';

-- pgq:function enqueue_many


-- The highest raise of a key that this statement sees (NULL: none): one probe of key_raises_key_idx.
-- pgq:function key_raised
REVOKE EXECUTE ON FUNCTION pgq.key_raised(text, text) FROM PUBLIC;

-- The completions: a keyed job's effective input watermark is greatest(input_watermark, the highest
-- raise of its key the statement sees). The dirty re-run compares it with the watermark the run
-- processed and, queuing the job again, stores it in input_watermark (the next claim hands it to the
-- worker). Otherwise revision 0011's bodies (renamed *_core by revision 0012). The raise probe sits
-- behind `j.dedupe_key IS NOT NULL` (and the CASE branch of keyed rows): a batch of unkeyed jobs
-- evaluates what it evaluated before.
-- pgq:function complete_core
-- pgq:function complete_skip_core

-- The raises' share of the settle, under pgq.settle's advisory lock (one at a time). Up to lim keys
-- per step:
--   (1) raises a successful run covered (done_watermark >= watermark) are deleted;
--   (2) the others of a key with an active job are folded into it: input_watermark raised, short
--       row locks of the settle's own (SKIP LOCKED: a row some transaction holds waits for the next
--       settle), then deleted;
--   (3) a key with neither lost its job since the raise was written: the raise was meant for a job
--       that finished. A raise for a job that failed or was cancelled for good, written before that
--       finish, is dropped (the old lock made that finish wait for the enqueue: the job failed with
--       the raised watermark and nothing ran it). Any other (the job succeeded without seeing it, or
--       it was written after the finish, or the job is gone) is what an enqueue finding no active job
--       does: a new job, with the enqueue's columns and the key's highest such watermark, unless a
--       run covered it by then. That insert waits at most wait_ms for another transaction inserting
--       the key (a producer's open enqueue); past that, the key waits for the next settle.
-- Returns how many raises it applied or deleted.
-- pgq:function settle_raises
REVOKE EXECUTE ON FUNCTION pgq.settle_raises(integer, integer) FROM PUBLIC;

-- The settle applies the raises too (revision 0012's body, and pgq.settle_raises).
-- pgq:function settle

-- The claim folds the raises of the keys it claims (the one change to revision 0014's body: an
-- assignment in its UPDATE, whose CASE runs the probe for keyed rows only). A raise committed after
-- the claim is left to the completion's dirty re-run, as a raise of the job's input_watermark was.
-- pgq:function claim
