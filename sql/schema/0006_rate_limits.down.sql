-- Reverts revision 0006: no rate limits (jobs of formerly limited kinds run unthrottled).
DROP TABLE pgq.rate_limit_starts;
DROP TABLE pgq.rate_limits;
