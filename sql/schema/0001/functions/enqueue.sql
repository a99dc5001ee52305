CREATE OR REPLACE FUNCTION pgq.enqueue(
    kind         text,
    payload      jsonb DEFAULT '{}',
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    dedupe_key   text DEFAULT NULL,
    watermark    bigint DEFAULT NULL,
    max_attempts integer DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
AS $fn$
    SELECT e.id FROM pgq.enqueue_many(
        ARRAY[kind], ARRAY[payload], ARRAY[queue], ARRAY[priority::smallint], ARRAY[run_at],
        ARRAY[NULL::double precision], ARRAY[dedupe_key], ARRAY[watermark], ARRAY[max_attempts]) AS e;
$fn$;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer) IS
    'Enqueue one job and return its id (or the id of the active job holding dedupe_key).';
