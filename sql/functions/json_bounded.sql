CREATE OR REPLACE FUNCTION pgq.json_bounded(v jsonb) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$
    SELECT CASE
        WHEN v IS NULL THEN true
        WHEN pg_catalog.pg_column_compression(v) IS NULL THEN
            pg_catalog.pg_column_size(v) < 512
            OR (pg_catalog.pg_column_size(v) <= 8388608
                AND NOT pg_catalog.jsonb_path_exists(v, 'strict $.**{65}'))
        ELSE pg_catalog.pg_column_size(pg_catalog.jsonb_build_array(v)) <= 8388608 + 8
             AND NOT pg_catalog.jsonb_path_exists(v, 'strict $.**{65}')
    END
$fn$;

COMMENT ON FUNCTION pgq.json_bounded(jsonb) IS
    'Whether a JSON value from a caller is within pgq''s bounds: NULL, or nested at most 64 levels below '
    'its top and at most 8 MiB as jsonb (revision 0019).';
