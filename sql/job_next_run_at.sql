-- job_next_run_at: seconds (database clock) until the earliest queued job of the given queues (all
-- queues when `queues` is NULL) is due, negative when one is due already; NULL when nothing is queued.
-- An idle worker asks this after a claim came back short and sleeps until then when that is sooner
-- than its poll interval, so scheduled jobs and retries start on time without fast polling.
-- pgq.next_run_at (revision 0035) answers it with loose index scans of the live partition's claim
-- index: it never reads every queued row, so a million jobs scheduled for later cost a handful of
-- index probes.
SELECT pgq.next_run_at(%(queues)s::text[]) AS seconds
