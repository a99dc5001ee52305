-- dashboard_paused_by: name the dashboard's user, not the database role, as who paused queue `queue`
-- (pgq.paused_queues.paused_by; pgq.pause records current_user). Run in the pause's own
-- transaction, only when that pause changed the queue's state: a queue paused already keeps its
-- author.
UPDATE pgq.paused_queues SET paused_by = %(actor)s::text WHERE queue = %(queue)s::text
