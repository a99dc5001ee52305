-- job_enqueue_unique: enqueue jobs with a dedupe key and a uniqueness variant (unique_for,
-- on_conflict 'replace', debounce; revision 0018); returns one id per input row, in input order.
-- The rules live in pgq.enqueue_unique, which the SQL API pgq.enqueue() shares.
SELECT e.id
FROM pgq.enqueue_unique(
    %(kinds)b::text[],
    %(payloads)b::text[]::jsonb[],
    %(queues)b::text[],
    %(priorities)b::smallint[],
    %(run_ats)b::timestamptz[],
    %(delays)b::double precision[],
    %(dedupe_keys)b::text[],
    %(max_attempts)b::integer[],
    %(group_keys)b::text[],
    %(unique_fors)b::double precision[],
    %(replaces)b::boolean[],
    %(debounces)b::double precision[]
) AS e
ORDER BY e.ord
