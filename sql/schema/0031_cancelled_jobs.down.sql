-- pgq schema, revision 0031 down: without jobs_cancelled_idx.
DROP INDEX pgq.jobs_cancelled_idx;
