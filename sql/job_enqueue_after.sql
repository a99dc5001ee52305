-- job_enqueue_after: enqueue a batch of jobs some of which depend on others (Queue.enqueue with
-- depends_on); returns one id per input row, in input order. The rules live in pgq.enqueue_after
-- (sql/functions/enqueue_after.sql): a job waits while a parent has not finished. Dependencies come
-- as an edge list: edge_jobs[k] (1-based position in the batch) depends on job edge_parents[k]. Jobs
-- with a sequence key come here too: pgq.enqueue_after chains each after its key's tail (revision 0017).
SELECT e.id
FROM pgq.enqueue_after(
    %(kinds)b::text[],
    %(payloads)b::text[]::jsonb[],
    %(queues)b::text[],
    %(priorities)b::smallint[],
    %(run_ats)b::timestamptz[],
    %(delays)b::double precision[],
    %(max_attempts)b::integer[],
    %(run_on_failure)b::boolean[],
    %(edge_jobs)b::integer[],
    %(edge_parents)b::bigint[],
    %(group_keys)b::text[],
    %(sequence_keys)b::text[],
    %(sequence_continue)b::boolean[]
) AS e
ORDER BY e.ord
