-- finished_count: one pass of the finished-job counts (pgq.count_finished, revision 0026), run by the
-- maintenance loop: counts again the last `recount_s` seconds before what was counted, and counts on
-- up to the current minute (at most `span_s` seconds of minutes per pass). NULL: another worker's pass
-- was running (one at a time: the lock of pgq.finished_counts_state's row).
SELECT pgq.count_finished(make_interval(secs => %(recount_s)s), make_interval(secs => %(span_s)s))
       AS counted_through
