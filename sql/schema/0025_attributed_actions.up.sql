-- pgq schema, revision 0025: every operator action attributed and audited (issue #44). Each action
-- records two names: the actor its caller claims (the dashboard's user, the CLI's --actor, Python's
-- actor=; NULL when none is named) and the database role that ran it (session_user), which the
-- caller cannot choose. What a role could write anyway it can still forge: an administrator owns
-- these tables.
--   - pgq.cancel records every cancel in pgq.job_audit (also straight from SQL), and takes the actor;
--     so does the new pgq.retry, every retry;
--   - pgq.pause records the actor (else the role) and the role in pgq.paused_queues, and pause and
--     resume record themselves in pgq.control_audit, a new table for actions on queues;
--   - pgq.explain names who cancelled a job and who paused its queue, with the role.
-- Limit changes are recorded in pgq.control_audit by pgq's client (sql/limit_audit.sql), in the
-- change's transaction, when the role may write it (pgq's admin; not a worker setting its tasks'
-- limits at start-up).

-- 1. Actions on queues and on the limits of kinds.
CREATE TABLE pgq.control_audit (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    action  text NOT NULL CHECK (action IN ('pause', 'resume', 'concurrency_limit', 'rate_limit', 'group_limits')),
    target  text NOT NULL,
    actor   text,
    db_role text NOT NULL DEFAULT session_user,
    details jsonb NOT NULL DEFAULT '{}' CHECK (pgq.json_bounded(details))
);
-- The history of one queue or kind, newest first.
CREATE INDEX control_audit_target_idx ON pgq.control_audit (target, id);
COMMENT ON TABLE pgq.control_audit IS
    'Actions on queues (pause, resume) and on the limits of kinds that changed something, one row each, '
    'in the action''s transaction.';
COMMENT ON COLUMN pgq.control_audit.id IS 'Row id.';
COMMENT ON COLUMN pgq.control_audit.at IS 'When (database clock).';
COMMENT ON COLUMN pgq.control_audit.action IS
    'pause, resume (a queue), or concurrency_limit, rate_limit, group_limits (a kind''s limits set or removed).';
COMMENT ON COLUMN pgq.control_audit.target IS 'The queue (pause, resume) or the kind (limits).';
COMMENT ON COLUMN pgq.control_audit.actor IS 'Who asked, as the caller named them (unverified); NULL: none named (see db_role).';
COMMENT ON COLUMN pgq.control_audit.db_role IS 'The database role that ran it (session_user).';
COMMENT ON COLUMN pgq.control_audit.details IS
    'A limit change: {"was": the limits before, "now": after}, each null when there was or is none.';

-- 2. Who paused a queue: the actor, and the role (NULL for queues paused before this revision).
ALTER TABLE pgq.paused_queues ADD COLUMN paused_role text;
ALTER TABLE pgq.paused_queues ALTER COLUMN paused_role SET DEFAULT session_user;
ALTER TABLE pgq.paused_queues ALTER COLUMN paused_by SET DEFAULT session_user;
COMMENT ON COLUMN pgq.paused_queues.paused_by IS
    'Who paused it: the actor the caller named (unverified), else the database role.';
COMMENT ON COLUMN pgq.paused_queues.paused_role IS
    'The database role that paused it (session_user); NULL: paused before revision 0025.';

COMMENT ON TABLE pgq.job_audit IS
    'Actions on jobs: one row per bulk batch (its own transaction) or per single action (cancel, retry, '
    'run now), with the jobs it changed. The jobs of a deleted batch are gone; their ids stay here.';
COMMENT ON COLUMN pgq.job_audit.actor IS
    'Who asked, as the caller named them (unverified: the dashboard''s user, the CLI''s --actor, '
    'Python''s actor=); NULL: none named (see db_role).';

-- 3. The functions. Their signatures gain `actor`: the old ones are dropped (no overloads).
DROP FUNCTION pgq.cancel(bigint);
-- pgq:function cancel
DROP FUNCTION pgq.pause(text);
-- pgq:function pause
DROP FUNCTION pgq.resume(text);
-- pgq:function resume
-- pgq:function explain
-- A new SQL API: pgq.retry, the retry of sql/job_retry.sql as a function, so that it is audited from
-- SQL as pgq.cancel is. Like pgq.cancel, it runs with its caller's rights (an administrator's).
-- pgq:function retry
