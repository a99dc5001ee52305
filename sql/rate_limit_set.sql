-- rate_limit_set: at most `max_starts` jobs of `kind` start in any `per_s`-second window, across all
-- workers. Takes the limit row's lock, so it waits for a claim of the kind in progress. Returns
-- whether the kind had no such limit before (then its queued jobs are marked next: limits_changed).
INSERT INTO pgq.rate_limits AS r (kind, max_starts, per_s)
VALUES (%(kind)s, %(max_starts)s, %(per_s)s)
ON CONFLICT (kind) DO UPDATE SET max_starts = excluded.max_starts, per_s = excluded.per_s, updated_at = now()
RETURNING (r.xmax = 0) AS created
