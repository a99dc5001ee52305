-- concurrency_limit_set: at most `max_running` jobs of `kind` run at once across all workers.
-- Takes the limit row's lock, so it waits for a claim of the kind in progress. Returns whether the
-- kind had no such limit before (then its queued jobs are marked next: limits_changed).
INSERT INTO pgq.concurrency_limits AS c (kind, max_running)
VALUES (%(kind)s, %(max_running)s)
ON CONFLICT (kind) DO UPDATE SET max_running = excluded.max_running, updated_at = now()
RETURNING (c.xmax = 0) AS created
