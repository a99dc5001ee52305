-- session_utc: run once on each connection of a pool pgq creates (never on a caller's connection).
-- Why: the claim reads four timestamps per job, and psycopg converts each into the session's zone.
-- For a zone name such as 'Etc/UTC' (the Debian and Docker default) that is a ZoneInfo conversion,
-- 1.2 us per claimed job in all; for 'UTC' psycopg uses datetime.timezone.utc and skips it. pgq's SQL
-- never depends on the session's zone (no casts to date or timestamp), so only the tzinfo of the
-- datetimes pgq returns changes: the same instants, in UTC.
SET TIME ZONE 'UTC'
