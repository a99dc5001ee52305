-- job_get: one job by id.
SELECT j.* FROM pgq.jobs j WHERE j.id = %(id)s
