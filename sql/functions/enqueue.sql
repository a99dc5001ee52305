CREATE OR REPLACE FUNCTION pgq.enqueue(
    kind                text,
    payload             jsonb DEFAULT '{}',
    queue               text DEFAULT 'default',
    priority            integer DEFAULT 0,
    run_at              timestamptz DEFAULT NULL,
    dedupe_key          text DEFAULT NULL,
    watermark           bigint DEFAULT NULL,
    max_attempts        integer DEFAULT NULL,
    depends_on          bigint[] DEFAULT NULL,
    on_parent_failure   text DEFAULT 'cancel',
    group_key           text DEFAULT NULL,
    sequence_key        text DEFAULT NULL,
    sequence_on_failure text DEFAULT 'hold',
    unique_for          interval DEFAULT NULL,
    on_conflict         text DEFAULT 'ignore',
    debounce            interval DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF on_parent_failure IS NULL OR on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'', got %', coalesce(on_parent_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_on_failure IS NULL OR sequence_on_failure NOT IN ('hold', 'continue') THEN
        RAISE EXCEPTION 'sequence_on_failure must be ''hold'' or ''continue'', got %',
                        coalesce(sequence_on_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_key = '' THEN
        RAISE EXCEPTION 'sequence_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF group_key = '' THEN
        RAISE EXCEPTION 'group_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_conflict IS NULL OR on_conflict NOT IN ('ignore', 'replace') THEN
        RAISE EXCEPTION 'on_conflict must be ''ignore'' or ''replace'', got %', coalesce(on_conflict, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unique_for IS NOT NULL OR on_conflict = 'replace' OR debounce IS NOT NULL THEN
        IF dedupe_key IS NULL THEN
            RAISE EXCEPTION 'unique_for, on_conflict ''replace'' and debounce need a dedupe_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for <= interval '0' OR debounce <= interval '0' THEN
            RAISE EXCEPTION 'unique_for and debounce must be positive' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for > interval '31 days' THEN
            RAISE EXCEPTION 'unique_for must be at most 31 days' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF unique_for IS NOT NULL AND (on_conflict = 'replace' OR debounce IS NOT NULL) THEN
            RAISE EXCEPTION 'unique_for cannot be combined with on_conflict ''replace'' or debounce'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF debounce IS NOT NULL AND run_at IS NOT NULL THEN
            RAISE EXCEPTION 'debounce cannot be combined with run_at' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF watermark IS NOT NULL OR depends_on IS NOT NULL OR sequence_key IS NOT NULL THEN
            RAISE EXCEPTION 'unique_for, on_conflict ''replace'' and debounce cannot be combined with watermark, '
                            'depends_on or sequence_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN (SELECT e.id FROM pgq.enqueue_unique(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[max_attempts], ARRAY[group_key],
            ARRAY[extract(epoch FROM unique_for)::double precision], ARRAY[on_conflict = 'replace'],
            ARRAY[extract(epoch FROM debounce)::double precision]) AS e);
    END IF;
    IF depends_on IS NULL AND sequence_key IS NULL THEN
        RETURN (SELECT e.id FROM pgq.enqueue_many(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts],
            ARRAY[group_key]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION '% cannot be combined with dedupe_key or watermark',
                        CASE WHEN depends_on IS NULL THEN 'sequence_key' ELSE 'depends_on' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[coalesce(cardinality(depends_on), 0)]), coalesce(depends_on, '{}'), ARRAY[group_key],
        ARRAY[sequence_key], ARRAY[sequence_on_failure = 'continue']) AS e);
END;
$fn$;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text,
                                text, text, interval, text, interval) IS
    'Enqueue one job and return its id (or the id of the job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback); '
    'group_key: the job''s group (per-group limits, fair claiming); sequence_key: its sequence (runs after '
    'the key''s previous job, one at a time); sequence_on_failure: ''hold'' (default: failing for good holds '
    'the sequence) or ''continue''; with dedupe_key: unique_for (dedupe against recent finishes too), '
    'on_conflict ''ignore'' (default) or ''replace'', debounce (replace, run_at = now + debounce).';
