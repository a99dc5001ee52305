-- concurrency_limit_set: at most `max_running` jobs of `kind` run at once across all workers.
-- Takes the limit row's lock, so it waits for a claim of the kind in progress. Returns whether the
-- kind had no such limit before (then its queued jobs are marked next: limits_changed). Through
-- pgq.concurrency_limit_set (revision 0020): a worker has no write on pgq.concurrency_limits.
SELECT pgq.concurrency_limit_set(%(kind)s, %(max_running)s) AS created
