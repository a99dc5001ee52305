-- job_enqueue: enqueue a batch (one element per job in each array); returns one id per input row,
-- in input order. All dedupe and watermark rules live in pgq.enqueue_many (sql/schema), which the
-- SQL API pgq.enqueue() shares, so Python and psql callers get the same semantics.
-- Payloads arrive as JSON text: the client serialized and checked them before sending anything.
SELECT e.id
FROM pgq.enqueue_many(
    %(kinds)s::text[],
    %(payloads)s::text[]::jsonb[],
    %(queues)s::text[],
    %(priorities)s::smallint[],
    %(run_ats)s::timestamptz[],
    %(delays)s::double precision[],
    %(dedupe_keys)s::text[],
    %(watermarks)s::bigint[],
    %(max_attempts)s::integer[]
) AS e
ORDER BY e.ord
