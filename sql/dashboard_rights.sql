-- dashboard_rights: what the dashboard's database role may do, so that it shows only the buttons
-- that can work and refuses the rest with the reason. Cancelling and retrying need DELETE on
-- pgq.jobs, the privilege the trigger of revision 0002 (jobs_guard_admin_transition) checks;
-- pausing and resuming insert into and delete from pgq.paused_queues (pgq.pause, pgq.resume).
-- pgq_admin (and the owner, and superusers) have all of them; pgq_worker and pgq_producer none.
SELECT current_user AS role,
       has_table_privilege('pgq.jobs', 'DELETE') AS can_change_jobs,
       has_table_privilege('pgq.paused_queues', 'INSERT')
           AND has_table_privilege('pgq.paused_queues', 'DELETE') AS can_pause
