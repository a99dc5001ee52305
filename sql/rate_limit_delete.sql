-- rate_limit_delete: remove the rate limit of `kind` (and its window of starts).
WITH gone AS (DELETE FROM pgq.rate_limits WHERE kind = %(kind)s RETURNING kind)
DELETE FROM pgq.rate_limit_starts s USING gone g WHERE s.kind = g.kind
