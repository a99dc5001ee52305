-- pgq schema, revision 0026: exact counts of finished jobs, kept off the hot path (issue #44).
-- pgq.finished_counts holds, per minute of finished_at, queue, kind and status, how many jobs
-- finished; the maintenance loop fills it (pgq.count_finished, one worker at a time), recounting the
-- last few minutes each pass so that late commits are counted. Claims, completions and failures
-- write nothing more. The counts outlive the jobs: a statement trigger keeps the counts of finished
-- jobs deleted from minutes a pass counts again (older ones are counted for good already).
CREATE TABLE pgq.finished_counts (
    minute timestamptz    NOT NULL,
    queue  text           NOT NULL,
    kind   text           NOT NULL,
    status pgq.job_status NOT NULL,
    jobs   bigint         NOT NULL CHECK (jobs >= 0),
    PRIMARY KEY (minute, queue, kind, status)
);
COMMENT ON TABLE pgq.finished_counts IS
    'Jobs finished (succeeded, failed, cancelled) per minute of finished_at, queue, kind and status, as '
    'pgq.count_finished counted them (revision 0026): the jobs finished before pgq.finished_counts_state''s '
    'counted_through (its minute in part), for 8 days (then in pgq.finished_counts_hourly). Retention does not change them.';
COMMENT ON COLUMN pgq.finished_counts.minute IS 'The minute of finished_at (from a whole UTC hour).';
COMMENT ON COLUMN pgq.finished_counts.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN pgq.finished_counts.kind IS 'The jobs'' kind.';
COMMENT ON COLUMN pgq.finished_counts.status IS 'Their final status: succeeded, failed or cancelled.';
COMMENT ON COLUMN pgq.finished_counts.jobs IS 'How many jobs finished so in that minute.';

CREATE TABLE pgq.finished_counts_hourly (
    hour   timestamptz    NOT NULL,
    queue  text           NOT NULL,
    kind   text           NOT NULL,
    status pgq.job_status NOT NULL,
    jobs   bigint         NOT NULL CHECK (jobs >= 0),
    PRIMARY KEY (hour, queue, kind, status)
);
COMMENT ON TABLE pgq.finished_counts_hourly IS
    'pgq.finished_counts summed per hour (revision 0026), kept by the same passes: the week''s chart and '
    'the day''s counts read whole hours here. The hour of counted_through holds its minutes before it only. '
    'Its minutes are kept 8 days, its hours for good.';
COMMENT ON COLUMN pgq.finished_counts_hourly.hour IS 'The hour of finished_at (a whole UTC hour).';
COMMENT ON COLUMN pgq.finished_counts_hourly.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN pgq.finished_counts_hourly.kind IS 'The jobs'' kind.';
COMMENT ON COLUMN pgq.finished_counts_hourly.status IS 'Their final status: succeeded, failed or cancelled.';
COMMENT ON COLUMN pgq.finished_counts_hourly.jobs IS 'How many jobs finished so in that hour.';

CREATE TABLE pgq.finished_counts_deleted (
    minute timestamptz    NOT NULL,
    queue  text           NOT NULL,
    kind   text           NOT NULL,
    status pgq.job_status NOT NULL,
    jobs   bigint         NOT NULL,
    PRIMARY KEY (minute, queue, kind, status)
);
COMMENT ON TABLE pgq.finished_counts_deleted IS
    'Finished jobs deleted from minutes that pgq.count_finished counts again, per minute, queue, kind and '
    'status (revision 0026): added to what is left of them when those minutes are counted again.';
COMMENT ON COLUMN pgq.finished_counts_deleted.minute IS 'The minute of finished_at (from a whole UTC hour).';
COMMENT ON COLUMN pgq.finished_counts_deleted.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN pgq.finished_counts_deleted.kind IS 'The jobs'' kind.';
COMMENT ON COLUMN pgq.finished_counts_deleted.status IS 'Their final status: succeeded, failed or cancelled.';
COMMENT ON COLUMN pgq.finished_counts_deleted.jobs IS 'How many of them were deleted.';

CREATE TABLE pgq.finished_counts_state (
    one             boolean PRIMARY KEY DEFAULT true CHECK (one),
    counted_through timestamptz,
    counted_at      timestamptz,
    recount         interval NOT NULL DEFAULT interval '0'
);
COMMENT ON TABLE pgq.finished_counts_state IS
    'One row (revision 0026): pgq.finished_counts holds the jobs finished before counted_through (NULL: none '
    'counted yet), counted at counted_at; each pass counts the last `recount` before it again.';
COMMENT ON COLUMN pgq.finished_counts_state.one IS 'Always true: the table has one row.';
COMMENT ON COLUMN pgq.finished_counts_state.counted_through IS
    'pgq.finished_counts holds the jobs finished before this time (NULL: none counted yet).';
COMMENT ON COLUMN pgq.finished_counts_state.counted_at IS 'When the last pass ran (its transaction''s start).';
COMMENT ON COLUMN pgq.finished_counts_state.recount IS 'How much before counted_through the next pass counts again.';
INSERT INTO pgq.finished_counts_state DEFAULT VALUES;

-- pgq:function count_finished
REVOKE EXECUTE ON FUNCTION pgq.count_finished(interval, interval) FROM PUBLIC;

-- pgq:function finished_counts_keep_deleted
REVOKE EXECUTE ON FUNCTION pgq.finished_counts_keep_deleted() FROM PUBLIC;
CREATE TRIGGER jobs_deleted_keep_counts
    AFTER DELETE ON pgq.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION pgq.finished_counts_keep_deleted();
