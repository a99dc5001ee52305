-- finished_partitions_ensure: the day partitions of pgq.finished_jobs from today to %(days)s days
-- ahead that are missing are made (revision 0033); returns how many. Cheap when none is missing.
-- Run by `pgq purge` and by every worker's maintenance (hourly), so acknowledgements never land in
-- the default partition.
SELECT pgq.finished_partitions_ensure(%(days)s::integer) AS created
