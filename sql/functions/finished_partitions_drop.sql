CREATE OR REPLACE FUNCTION pgq.finished_partitions_drop(older_than interval, after text DEFAULT '',
                                                        lock_wait interval DEFAULT interval '1 second')
RETURNS TABLE (partition text, outcome text, jobs bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s'
AS $fn$
DECLARE
    horizon timestamptz := statement_timestamp() - older_than;
    origin  CONSTANT timestamptz := '2000-01-01 00:00:00+00';
    part    text;
    ends    timestamptz;
    counted timestamptz;
    dependents bigint[];
    sequenced  bigint[];
    held    boolean;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'pgq.finished_partitions_drop: older_than must be >= 0, got %', coalesce(older_than::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_wait IS NULL OR lock_wait < interval '1 millisecond' OR lock_wait > interval '1 minute' THEN
        RAISE EXCEPTION 'pgq.finished_partitions_drop: lock_wait must be between 1 ms and 1 minute, got %',
            coalesce(lock_wait::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The oldest day partition after `after` (names sort by day) whose whole day ends at or before the
    -- horizon. Only the days pgq.finished_partitions_ensure makes: never finished_jobs_before_0033
    -- (kept, emptied by the row deletes, for a downgrade) nor finished_jobs_default.
    SELECT c.relname, (to_date(substr(c.relname, 15), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
    INTO part, ends
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'pgq.finished_jobs'::regclass
      AND c.relname ~ '^finished_jobs_[0-9]{8}$'
      AND c.relname > coalesce(after, '')
      AND (to_date(substr(c.relname, 15), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= horizon
    ORDER BY c.relname
    LIMIT 1;
    IF part IS NULL THEN
        RETURN;
    END IF;
    partition := part;
    -- The locks are waited for `lock_wait` at most (this function's SET clause keeps the setting to it).
    PERFORM set_config('lock_timeout', (ceil(extract(epoch FROM lock_wait) * 1000))::bigint::text || 'ms', true);
    BEGIN
        -- One dropper (or pgq.finished_partitions_ensure) at a time: SHARE UPDATE EXCLUSIVE on the
        -- history alone, which acknowledgements (ROW EXCLUSIVE) and readers do not wait for. Then no
        -- write to the day (a late acknowledgement, a retry or a row purge of one of its jobs) while
        -- what its rows leave behind is recorded; readers go on.
        LOCK TABLE ONLY pgq.finished_jobs IN SHARE UPDATE EXCLUSIVE MODE;
        EXECUTE format('LOCK TABLE pgq.%I IN SHARE ROW EXCLUSIVE MODE', part);
        -- The purge keeps a failed job that holds its sequence (an open held edge, revision 0017): a day
        -- with one is not dropped but left to the row deletes, which keep that job. Such jobs are few,
        -- and so are open edges: one probe of the day's id index per open held edge.
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM pgq.job_dependencies h JOIN pgq.%I j ON j.id = h.parent_id'
                       ' WHERE h.parent_outcome IS NULL AND h.sequence_hold AND j.status = ''failed'')', part)
        INTO STRICT held;
        IF held THEN
            outcome := 'held';
            RETURN NEXT;
            RETURN;
        END IF;
        -- What the row triggers of a DELETE would keep, none of which a DROP fires. One scan of the day:
        -- its size, its jobs that had parents (their edges go, as the row purge deletes them) and those
        -- with a sequence key (a key's tail that names one goes, as jobs_sequence_tail_prune_trg does).
        EXECUTE format('SELECT count(*), array_agg(j.id) FILTER (WHERE j.pending_parents IS NOT NULL),'
                       ' array_agg(j.id) FILTER (WHERE j.sequence_key IS NOT NULL) FROM pgq.%I j', part)
        INTO jobs, dependents, sequenced;
        IF dependents IS NOT NULL THEN
            DELETE FROM pgq.job_dependencies e USING unnest(dependents) AS d(id) WHERE e.job_id = d.id;
        END IF;
        IF sequenced IS NOT NULL THEN
            DELETE FROM pgq.sequence_tails t
            WHERE t.ctid = ANY(ARRAY(SELECT o.ctid FROM pgq.sequence_tails o
                                     WHERE o.job_id = ANY(sequenced)
                                     FOR UPDATE SKIP LOCKED));
        END IF;
        -- unique_for (jobs_key_finish_trg): each key's newest finish of the day, when within the longest
        -- window (31 days); then, as that trigger does, rows past it go.
        IF ends > statement_timestamp() - interval '31 days' THEN
            EXECUTE format('INSERT INTO pgq.key_finishes AS f (queue, dedupe_key, job_id, finished_at)'
                           ' SELECT DISTINCT ON (j.queue, j.dedupe_key) j.queue, j.dedupe_key, j.id, j.finished_at'
                           ' FROM pgq.%I j'
                           ' WHERE j.dedupe_key IS NOT NULL AND j.finished_at > statement_timestamp() - interval ''31 days'''
                           ' ORDER BY j.queue, j.dedupe_key, j.finished_at DESC, j.id DESC'
                           ' ON CONFLICT (queue, dedupe_key) DO UPDATE'
                           ' SET job_id = EXCLUDED.job_id, finished_at = EXCLUDED.finished_at'
                           ' WHERE f.finished_at < EXCLUDED.finished_at', part);
        END IF;
        DELETE FROM pgq.key_finishes f
        WHERE (f.queue, f.dedupe_key) IN (SELECT o.queue, o.dedupe_key FROM pgq.key_finishes o
                                          WHERE o.finished_at < statement_timestamp() - interval '31 days'
                                          ORDER BY o.finished_at LIMIT 1000
                                          FOR UPDATE SKIP LOCKED);
        -- The finished-job counts (jobs_deleted_keep_counts): the day's jobs of minutes that
        -- pgq.count_finished counts again, kept in pgq.finished_counts_deleted. Usually none: the
        -- horizon is far behind the minutes counted again.
        counted := coalesce((SELECT pg_catalog.date_bin('1 minute', s.counted_through - s.recount, origin)
                             FROM pgq.finished_counts_state s), '-infinity');
        IF ends > counted THEN
            EXECUTE format('INSERT INTO pgq.finished_counts_deleted AS d (minute, queue, kind, status, jobs)'
                           ' SELECT pg_catalog.date_bin(''1 minute'', j.finished_at, %L), j.queue, j.kind, j.status,'
                           ' count(*) FROM pgq.%I j WHERE j.finished_at >= %L'
                           ' GROUP BY 1, 2, 3, 4'
                           ' ON CONFLICT (minute, queue, kind, status) DO UPDATE SET jobs = d.jobs + excluded.jobs',
                           origin, part, counted);
        END IF;
        -- The drop itself locks the history exclusively (it waits for the statements reading or writing
        -- it, and they for it): only for the catalog's change, the commit follows at once.
        EXECUTE format('DROP TABLE pgq.%I', part);
        outcome := 'dropped';
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        -- A lock not granted in time: nothing of the above happened. The caller tries again or leaves
        -- the day to the row deletes.
        outcome := 'busy';
        jobs := NULL;
    END;
    RETURN NEXT;
END;
$fn$;

COMMENT ON FUNCTION pgq.finished_partitions_drop(interval, text, interval) IS
    'Retention by partition (revision 0033): drops the oldest day partition of pgq.finished_jobs named after '
    '`after` whose whole UTC day ended `older_than` ago or earlier, waiting `lock_wait` at most for each lock. '
    'Returns that partition and the outcome: dropped (with its number of jobs), held (it has a failed job that '
    'holds its sequence: the row purge deletes the rest), or busy (a lock was not granted: nothing changed); '
    'no row when no such partition is left. Before the drop it keeps what the row triggers of a delete keep: '
    'the edges of its jobs go, key tails naming them go, key finishes within 31 days and the counts of '
    'minutes still counted again are kept. One partition per call: each its own short transaction.';
