-- dashboard_rate_limits: each rate limit (pgq.rate_limits) with the starts of its kind inside its
-- sliding window now, counted as the claim counts them (job_claim.sql: pgq.rate_limit_starts newer
-- than the window's length, through rate_limit_starts_kind_at_idx).
SELECT r.kind, r.max_starts, r.per_s, r.updated_at,
       coalesce((SELECT sum(s.starts) FROM pgq.rate_limit_starts s
                 WHERE s.kind = r.kind AND s.at > now() - make_interval(secs => r.per_s)), 0)::bigint AS window_starts
FROM pgq.rate_limits r
ORDER BY r.kind
