-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: the history of finished jobs
-- that layouts A and B share, installed in the layout's schema (@schema@ is replaced by its name).
--
-- Its columns are pgq.jobs' own (LIKE: names, types, NOT NULL), so that today's pgq.jobs, once its
-- live rows are moved out, can be attached as its first partition (docs/design/lean-table.md,
-- "Migration"): no copy of the finished rows. The lease columns are always NULL here (a NULL costs a
-- bit of the row's null bitmap).
--
-- Range-partitioned by finished_at, a partition per day: retention detaches and drops whole
-- partitions instead of deleting rows. Rows arrive in finished_at order (an acknowledgement inserts
-- them with now()), so a BRIN index on finished_at costs an insert next to nothing and bounds
-- every time-range read (last hour's counts, the retention scan) to the pages of that range.
-- Ids: one sequence numbers live and finished jobs (the live table's), and a job moves as one row,
-- so an id names one job in live + history. A partitioned table's unique index must hold the
-- partition key, so the uniqueness of ids across partitions is the sequence's, not an index's.
-- @id_index@ is `btree (id)` (one entry per finished job; a lookup probes each partition's index)
-- or `brin (id)` (no entry: ids of one partition are close, since jobs finish about in the order
-- they were enqueued; a lookup reads the page ranges whose id range holds it, 16 pages each).
-- The BRIN indexes summarize each range of pages once the next one starts (autosummarize, done by
-- autovacuum): a range not summarized yet is read by every scan.
CREATE TABLE @schema@.job_history (LIKE pgq.jobs) PARTITION BY RANGE (finished_at);
ALTER TABLE @schema@.job_history ALTER COLUMN finished_at SET NOT NULL;

CREATE INDEX job_history_finished_brin ON @schema@.job_history USING brin (finished_at)
    WITH (autosummarize = on);
CREATE INDEX job_history_id ON @schema@.job_history USING @id_index@;
-- Only jobs that failed for good pay for these (the dashboard's failed list and counts).
CREATE INDEX job_history_failed ON @schema@.job_history (queue, finished_at) WHERE status = 'failed';

-- Daily partitions from `first` on, `days` of them; those that exist are left alone. Maintenance
-- keeps a few days ahead: a finished job whose day has no partition could not be acknowledged
-- (there is no DEFAULT partition: DETACH ... CONCURRENTLY refuses a table that has one).
CREATE FUNCTION @schema@.history_ensure(first date, days integer) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    d    date;
    made integer := 0;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        d := first + i;
        IF to_regclass(format('@schema@.job_history_%s', to_char(d, 'YYYYMMDD'))) IS NULL THEN
            EXECUTE format('CREATE TABLE @schema@.job_history_%s PARTITION OF @schema@.job_history '
                           'FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_vacuum_insert_scale_factor = 0)',
                           to_char(d, 'YYYYMMDD'), d::timestamptz, (d + 1)::timestamptz);
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END;
$fn$;

-- The partitions whose every row finished before `horizon` (retention drops these), oldest first.
CREATE FUNCTION @schema@.history_expired(horizon timestamptz) RETURNS SETOF regclass
LANGUAGE sql STABLE AS $fn$
    SELECT c.oid::regclass
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = '@schema@.job_history'::regclass
      AND (regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''(.*)''\)'))[1]::timestamptz
          <= horizon
    ORDER BY 1
$fn$;
