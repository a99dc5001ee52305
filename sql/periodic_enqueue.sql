-- periodic_enqueue: step 2 of a periodic run, in the transaction holding the periodic lock. Enqueues
-- the given ticks (one array element per tick; the dedupe key names the schedule and the tick) except
-- those that already have a job in any status: a tick that ran, failed or was cancelled is never
-- enqueued again. Jobs of finished ticks stay until retention deletes them, which is why a schedule's
-- catch-up window must be shorter than the retention. Served by jobs_dedupe_key_idx.
-- Only the lock holder enqueues ticks, and it sees every tick enqueued by earlier leaders (their
-- transactions committed before it got the lock), so each tick gets exactly one job.
-- Returns one row per job created.
WITH tick AS (
    SELECT t.ord, t.kind, t.payload, t.queue, t.priority, t.dedupe_key, t.max_attempts
    FROM unnest(%(kinds)s::text[], %(payloads)s::text[]::jsonb[], %(queues)s::text[],
                %(priorities)s::smallint[], %(dedupe_keys)s::text[], %(max_attempts)s::integer[])
         WITH ORDINALITY AS t(kind, payload, queue, priority, dedupe_key, max_attempts, ord)
),
fresh AS (
    SELECT t.*
    FROM tick t
    WHERE NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.queue = t.queue AND j.dedupe_key = t.dedupe_key)
),
batch AS (
    -- Empty arrays (not NULL) when every tick exists already: enqueue_many then inserts nothing.
    SELECT coalesce(array_agg(f.kind ORDER BY f.ord), '{}') AS kinds,
           coalesce(array_agg(f.payload ORDER BY f.ord), '{}') AS payloads,
           coalesce(array_agg(f.queue ORDER BY f.ord), '{}') AS queues,
           coalesce(array_agg(f.priority ORDER BY f.ord), '{}') AS priorities,
           coalesce(array_agg(f.dedupe_key ORDER BY f.ord), '{}') AS dedupe_keys,
           coalesce(array_agg(f.max_attempts ORDER BY f.ord), '{}') AS max_attempts
    FROM fresh f
)
SELECT e.id, b.dedupe_keys[e.ord] AS dedupe_key
FROM batch b
CROSS JOIN LATERAL pgq.enqueue_many(
    b.kinds, b.payloads, b.queues, b.priorities,
    array_fill(NULL::timestamptz, ARRAY[cardinality(b.kinds)]),
    array_fill(NULL::double precision, ARRAY[cardinality(b.kinds)]),
    b.dedupe_keys,
    array_fill(NULL::bigint, ARRAY[cardinality(b.kinds)]),
    b.max_attempts
) AS e
