-- group_limits_set: at most `max_running` running jobs and at most `max_starts` starts in any
-- `per_s`-second window per group key of `kind`, across all workers (NULL: no such limit). Takes the
-- row's lock, so it waits for a claim of the kind in progress. Grouped jobs are always claimed
-- through the limited path (revision 0014), so no job needs marking. Through pgq.group_limits_set
-- (revision 0020): a worker has no write on pgq.group_limits.
SELECT pgq.group_limits_set(%(kind)s, %(max_running)s, %(max_starts)s, %(per_s)s)
