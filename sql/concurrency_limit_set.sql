-- concurrency_limit_set: at most `max_running` jobs of `kind` run at once across all workers.
-- Takes the limit row's lock, so it waits for a claim of the kind in progress.
INSERT INTO pgq.concurrency_limits AS c (kind, max_running)
VALUES (%(kind)s, %(max_running)s)
ON CONFLICT (kind) DO UPDATE SET max_running = excluded.max_running, updated_at = now()
