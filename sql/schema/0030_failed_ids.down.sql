-- pgq schema, revision 0030 down: without jobs_failed_id_idx.
DROP INDEX pgq.jobs_failed_id_idx;
