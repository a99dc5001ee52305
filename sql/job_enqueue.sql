-- job_enqueue: enqueue a batch (one element per job in each array); returns one id per input row,
-- in input order. All dedupe and watermark rules live in pgq.enqueue_many (sql/schema), which the
-- SQL API pgq.enqueue() shares, so Python and psql callers get the same semantics.
-- Payloads arrive as JSON text: the client serialized and checked them before sending anything.
-- Array parameters use psycopg's binary format (the "b" placeholders): far cheaper to build than array literals.
SELECT e.id
FROM pgq.enqueue_many(
    %(kinds)b::text[],
    %(payloads)b::text[]::jsonb[],
    %(queues)b::text[],
    %(priorities)b::smallint[],
    %(run_ats)b::timestamptz[],
    %(delays)b::double precision[],
    %(dedupe_keys)b::text[],
    %(watermarks)b::bigint[],
    %(max_attempts)b::integer[],
    %(group_keys)b::text[]
) AS e
ORDER BY e.ord
