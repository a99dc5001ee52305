-- pgq schema, revision 0006: global rate limits. At most `max_starts` jobs of a kind start in any
-- `per_s`-second window, across all workers, by the database clock. Enforced by the claim: a kind
-- with a limit is claimed only in the two-step claim, which locks its limit row first (so claims of
-- the kind are serialised) and counts the starts of the window in a newer snapshot.

CREATE TABLE pgq.rate_limits (
    kind       text PRIMARY KEY,
    max_starts integer NOT NULL CHECK (max_starts > 0),
    per_s      double precision NOT NULL CHECK (per_s > 0 AND per_s <= 86400),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgq.rate_limits IS
    'Global rate limits: at most max_starts jobs of the kind start in any per_s-second window, '
    'across all workers (sliding window, database clock). Set by tasks declared with rate_limit=, '
    'by Queue.set_rate_limit, or by an INSERT here.';
COMMENT ON COLUMN pgq.rate_limits.kind IS 'Task kind the limit applies to.';
COMMENT ON COLUMN pgq.rate_limits.max_starts IS 'Most jobs of the kind that may start in one window.';
COMMENT ON COLUMN pgq.rate_limits.per_s IS 'Length of the sliding window, in seconds.';
COMMENT ON COLUMN pgq.rate_limits.updated_at IS 'When the limit was last set.';

-- The starts of rate-limited kinds still inside their window: one row per claim statement (its
-- time and how many jobs of the kind it started). The claim adds a row and deletes the rows that
-- left the window, so the table holds about one row per claim per window.
CREATE TABLE pgq.rate_limit_starts (
    kind   text NOT NULL,
    at     timestamptz NOT NULL,
    starts integer NOT NULL CHECK (starts > 0)
);
CREATE INDEX rate_limit_starts_kind_at_idx ON pgq.rate_limit_starts (kind, at);
COMMENT ON TABLE pgq.rate_limit_starts IS
    'Starts of rate-limited kinds inside their window (one row per claim), written by the claim.';
COMMENT ON COLUMN pgq.rate_limit_starts.kind IS 'Task kind.';
COMMENT ON COLUMN pgq.rate_limit_starts.at IS 'When the claim started them (statement time, database clock).';
COMMENT ON COLUMN pgq.rate_limit_starts.starts IS 'How many jobs of the kind that claim started.';
