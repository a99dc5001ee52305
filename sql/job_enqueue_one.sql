-- job_enqueue_one: enqueue a single job. The same pgq.enqueue_many call as job_enqueue (so the same
-- dedupe and watermark rules), but with scalar parameters wrapped into arrays here: building ten
-- one-element arrays on the client costs more than the whole statement on the server.
SELECT e.id
FROM pgq.enqueue_many(
    ARRAY[%(kind)s::text],
    ARRAY[%(payload)s::text::jsonb],
    ARRAY[%(queue)s::text],
    ARRAY[%(priority)s::smallint],
    ARRAY[%(run_at)s::timestamptz],
    ARRAY[%(delay)s::double precision],
    ARRAY[%(dedupe_key)s::text],
    ARRAY[%(watermark)s::bigint],
    ARRAY[%(max_attempts)s::integer],
    ARRAY[%(group_key)s::text]
) AS e
