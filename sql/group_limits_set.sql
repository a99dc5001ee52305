-- group_limits_set: at most `max_running` running jobs and at most `max_starts` starts in any
-- `per_s`-second window per group key of `kind`, across all workers (NULL: no such limit). Takes the
-- row's lock, so it waits for a claim of the kind in progress. Grouped jobs are always claimed
-- through the limited path (revision 0014), so no job needs marking.
INSERT INTO pgq.group_limits AS g (kind, max_running, max_starts, per_s)
VALUES (%(kind)s, %(max_running)s, %(max_starts)s, %(per_s)s)
ON CONFLICT (kind) DO UPDATE
SET max_running = excluded.max_running, max_starts = excluded.max_starts, per_s = excluded.per_s, updated_at = now()
