CREATE OR REPLACE FUNCTION pgq.enqueue(
    kind              text,
    payload           jsonb DEFAULT '{}',
    queue             text DEFAULT 'default',
    priority          integer DEFAULT 0,
    run_at            timestamptz DEFAULT NULL,
    dedupe_key        text DEFAULT NULL,
    watermark         bigint DEFAULT NULL,
    max_attempts      integer DEFAULT NULL,
    depends_on        bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    group_key         text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF on_parent_failure IS NULL OR on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'', got %', coalesce(on_parent_failure, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF depends_on IS NULL THEN
        RETURN (SELECT e.id FROM pgq.enqueue_many(
            ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
            ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts],
            ARRAY[group_key]) AS e);
    END IF;
    IF dedupe_key IS NOT NULL OR watermark IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with dedupe_key or watermark'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT e.id FROM pgq.enqueue_after(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[max_attempts], ARRAY[on_parent_failure = 'run'],
        array_fill(1, ARRAY[cardinality(depends_on)]), depends_on, ARRAY[group_key]) AS e);
END;
$fn$;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text, text) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key). depends_on: '
    'ids of jobs it waits for; on_parent_failure: ''cancel'' (default) or ''run'' (a batch callback); '
    'group_key: the job''s group (per-group limits, fair claiming).';
