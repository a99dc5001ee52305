-- dashboard_counts_state: how far pgq.finished_counts goes (revision 0026): its minutes before
-- counted_through are counted (NULL: none yet), by the pass that ended at counted_at, which counted
-- again the last `recount` before its previous end. One row.
SELECT s.counted_through, s.counted_at, extract(epoch FROM s.recount)::double precision AS recount_s
FROM pgq.finished_counts_state s
