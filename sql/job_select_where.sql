-- job_select_where: the next batch of ids of jobs matching a bulk action's filters (each optional:
-- NULL matches all), lowest first after `after_id` (keyset: the caller passes the last id of the
-- previous batch, so a run reads the table once, and a job changed by a batch is never picked again
-- by the same run). Locks nothing: the action's own statement locks and re-checks each row.
--   statuses            the statuses the action applies to (and the caller's --status, within them)
--   queue, kind         equal
--   error               case-insensitive substring of last_error (no wildcards)
--   text                case-insensitive substring of the kind, the dedupe key or last_error: the
--                       dashboard's search text, matched as sql/dashboard_jobs.sql matches it
--   payload             JSON containment: payload @> this jsonb
--   created_*, finished_* ranges: after <= t < before
--   error_line          the first line of last_error (its first 200 characters, '' without error
--                       text) equals this: one dead-letter group (sql/dashboard_failed_groups.sql)
SELECT j.id
FROM pgq.jobs j
WHERE j.id > %(after_id)s::bigint
  AND j.status = ANY(%(statuses)s::pgq.job_status[])
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(error)s::text IS NULL OR strpos(lower(j.last_error), lower(%(error)s::text)) > 0)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.kind), lower(%(text)s::text)) > 0
       OR strpos(lower(j.dedupe_key), lower(%(text)s::text)) > 0
       OR strpos(lower(j.last_error), lower(%(text)s::text)) > 0)
  AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
  AND (%(created_after)s::timestamptz IS NULL OR j.created_at >= %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR j.created_at < %(created_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR j.finished_at >= %(finished_after)s::timestamptz)
  AND (%(finished_before)s::timestamptz IS NULL OR j.finished_at < %(finished_before)s::timestamptz)
  AND (%(error_line)s::text IS NULL
       OR left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) = %(error_line)s::text)
ORDER BY j.id
LIMIT %(batch)s
