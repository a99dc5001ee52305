CREATE OR REPLACE FUNCTION pgq.claim_key(salt text, id bigint, attempts integer, run_at timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$
    SELECT ('x' || left(md5(salt || '/' || id || '/' || attempts || '/' || extract(epoch FROM run_at)), 16))::bit(64)::bigint
$fn$;

COMMENT ON FUNCTION pgq.claim_key(text, bigint, integer, timestamptz) IS
    'The advisory key a claim reserves job `id` under, given the claim''s salt (pgq.claim_secret and the '
    'minute) and the job''s attempts and run_at (revision 0021). Internal: granted to no role.';
