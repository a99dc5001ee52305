-- pgq schema, revision 0029 down: without jobs_failed_id_idx.
DROP INDEX pgq.jobs_failed_id_idx;
