-- job_cancel: cancel a queued or running job (pgq.cancel, revision 0005: the one implementation, also
-- the SQL API). A running job's lease is cleared, so its worker's completion is refused and the
-- cancellation stands, and its worker is notified to interrupt the handler. Frees the dedupe key.
-- pgq.cancel records the cancel in pgq.job_audit with `actor` (NULL: not named; revision 0025).
SELECT * FROM pgq.cancel(%(id)s, %(actor)s::text)
