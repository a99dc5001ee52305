CREATE OR REPLACE FUNCTION pgq.finished_partitions_ensure(days_ahead integer DEFAULT 7) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    today date := (statement_timestamp() AT TIME ZONE 'UTC')::date;
    day date;
    part text;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'days_ahead must be between 0 and 366, not %', days_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One creator at a time (the lock ATTACH takes anyway, which conflicts with itself): a second
    -- caller waits, then finds the days made. No advisory lock: any role could take that one.
    LOCK TABLE pgq.finished_jobs IN SHARE UPDATE EXCLUSIVE MODE;
    FOR day IN SELECT d::date FROM generate_series(today, today + days_ahead, interval '1 day') d LOOP
        part := 'finished_jobs_' || to_char(day, 'YYYYMMDD');
        CONTINUE WHEN to_regclass('pgq.' || part) IS NOT NULL;
        BEGIN
            -- A table of its own attached afterwards: CREATE TABLE ... PARTITION OF would lock the
            -- history exclusively; ATTACH takes SHARE UPDATE EXCLUSIVE (acknowledgements go on).
            EXECUTE format('CREATE TABLE pgq.%I (LIKE pgq.finished_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           part);
            EXECUTE format('CREATE INDEX %I ON pgq.%I (id)', part || '_job_id_idx', part);
            EXECUTE format('ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.%I'
                           ' FOR VALUES FROM (%L) TO (%L)',
                           part, day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
            EXECUTE format('COMMENT ON TABLE pgq.%I IS %L', part,
                           'The jobs of pgq.finished_jobs that finished on ' || day::text || ' (UTC).');
            created := created + 1;
        EXCEPTION
            -- The day is already covered (the partition of the jobs finished before revision 0033
            -- reaches into it), or finished jobs of it wait in the default partition: such a day
            -- stays where its rows are.
            WHEN invalid_object_definition OR check_violation THEN
                NULL;
        END;
    END LOOP;
    RETURN created;
END;
$fn$;

COMMENT ON FUNCTION pgq.finished_partitions_ensure(integer) IS
    'Creates the partitions of pgq.finished_jobs (one per UTC day, pgq.finished_jobs_YYYYMMDD) from today '
    'to days_ahead days ahead that do not exist yet, and returns how many it created. Days already covered, '
    'or whose finished jobs went to pgq.finished_jobs_default because no partition existed, are skipped. '
    'Run by pgq migrate and by retention (revision 0033).';
