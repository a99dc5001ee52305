-- rate_limit_set: at most `max_starts` jobs of `kind` start in any `per_s`-second window, across all
-- workers. Takes the limit row's lock, so it waits for a claim of the kind in progress. Returns
-- whether the kind had no such limit before (then its queued jobs are marked next: limits_changed).
-- Through pgq.rate_limit_set (revision 0020): a worker has no write on pgq.rate_limits.
SELECT pgq.rate_limit_set(%(kind)s, %(max_starts)s, %(per_s)s) AS created
