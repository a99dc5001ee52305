-- pgq schema, revision 0034 down: no notice for a running job cancelled without pgq's functions, and
-- revision 0033's heartbeat.

-- pgq:function heartbeat@previous
-- pgq:function jobs_guard_admin_transition@previous
DROP TRIGGER jobs_notify_cancel ON pgq.jobs;
-- pgq:function jobs_notify_cancel@previous
