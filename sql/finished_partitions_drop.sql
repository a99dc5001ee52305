-- finished_partitions_drop: retention by partition (revision 0033). Drops the oldest day partition of
-- pgq.finished_jobs named after %(after)s whose whole UTC day ended more than `older_than_s` seconds
-- ago, in its own transaction, each lock waited for `lock_wait_s` seconds at most; returns it and the
-- outcome (dropped, held, busy), or no row when none is left. The caller goes on with the next one
-- (`after` := the partition returned), tries a busy one again, and then deletes what is left past
-- the horizon row by row (job_purge.sql).
SELECT d.partition, d.outcome, d.jobs
FROM pgq.finished_partitions_drop(make_interval(secs => %(older_than_s)s), %(after)s::text,
                                  make_interval(secs => %(lock_wait_s)s)) d
