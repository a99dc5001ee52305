"""Revision 0025's audited actions by role: a producer or a worker may not cancel, retry, pause or
resume through pgq.cancel / pgq.retry / pgq.pause / pgq.resume (whatever actor it names), nor write pgq.control_audit,
pgq.job_audit or pgq.paused_queues' authors, and changes nothing; it may read the audit. The admin's
actions record the actor it names and its login role (session_user), also under SET ROLE: the name
is a claim, the role is what the database checked."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

import pgq

from .conftest import Roles
from .test_roles import assert_refused, refused, rows, table_state

AUDIT_STATE = ("SELECT (SELECT count(*) FROM pgq.job_audit) AS jobs, (SELECT count(*) FROM pgq.control_audit) AS "
               "control, (SELECT array_agg(queue || ':' || paused_by) FROM pgq.paused_queues) AS paused")


def test_only_the_admin_may_take_audited_actions_and_nobody_writes_the_audit(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        job_id = q.enqueue("k", queue="q")
        failed = q.enqueue("k", queue="f")
        q.cancel(failed, actor="root")
        q.pause("held", actor="root")
    before, audit_before = table_state(roles), rows(roles.dsn, AUDIT_STATE)
    for dsn in (roles.producer, roles.worker):
        for statement in (f"SELECT * FROM pgq.cancel({job_id}, 'alice')",
                          f"SELECT * FROM pgq.retry({failed}, 'alice')",
                          "SELECT pgq.pause('q', 'alice')",
                          "SELECT pgq.resume('held', 'alice')",
                          "INSERT INTO pgq.control_audit (action, target, actor) VALUES ('pause', 'q', 'alice')",
                          "INSERT INTO pgq.job_audit (action, actor, job_ids) VALUES ('cancel', 'alice', '{1}')",
                          "UPDATE pgq.paused_queues SET paused_by = 'alice'",
                          "UPDATE pgq.job_audit SET actor = 'alice'",
                          "DELETE FROM pgq.control_audit"):
            assert_refused(dsn, statement)
        with pgq.Queue(dsn) as q:
            refused(lambda: q.cancel(job_id, actor="alice"))
            refused(lambda: q.retry(failed, actor="alice"))
            refused(lambda: q.pause("q", actor="alice"))
            refused(lambda: q.resume("held", actor="alice"))
        assert rows(dsn, "SELECT action, actor FROM pgq.control_audit") == [
            {"action": "pause", "actor": "root"}]  # reading is allowed (the dashboard's viewers)
    assert table_state(roles) == before and rows(roles.dsn, AUDIT_STATE) == audit_before


def test_the_admin_names_an_actor_but_not_its_role(roles: Roles) -> None:
    login = conninfo_to_dict(roles.admin)["user"]
    with pgq.Queue(roles.dsn) as q:
        job_id = q.enqueue("k", queue="q")
    with pgq.Queue(roles.admin) as q:
        q.cancel(job_id, actor="mallory")
        q.pause("q", actor="mallory")
    with psycopg.connect(roles.admin, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles.names.admin)))
        conn.execute(b"SELECT pgq.resume('q', 'mallory')")
    assert rows(roles.dsn, "SELECT actor, db_role FROM pgq.job_audit") == [{"actor": "mallory", "db_role": login}]
    assert rows(roles.dsn, "SELECT action, actor, db_role FROM pgq.control_audit ORDER BY id") == [
        {"action": "pause", "actor": "mallory", "db_role": login},
        {"action": "resume", "actor": "mallory", "db_role": login}]
    with pgq.Queue(roles.admin) as q:
        q.pause("q")  # no actor: the login is who paused it
        reason = next(r for r in q.explain(q.enqueue("k", queue="q")).reasons if r.code == "queue_paused")
    assert reason.facts["paused_by"] == reason.facts["paused_role"] == login


def test_a_worker_sets_its_limits_unrecorded_and_the_admin_recorded(roles: Roles) -> None:
    with pgq.Queue(roles.worker) as q:  # a worker's start-up: its tasks' limits, no audit to write
        q.set_concurrency_limit("k", 2, actor="w")
        q.set_rate_limit("k", "5/s")
        q.set_group_limits("k", concurrency=1)
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.control_audit") == [{"n": 0}]
    with pgq.Queue(roles.admin) as q:
        q.set_concurrency_limit("k", 3, actor="alice")
    assert rows(roles.dsn, "SELECT action, actor, db_role, details FROM pgq.control_audit") == [
        {"action": "concurrency_limit", "actor": "alice", "db_role": conninfo_to_dict(roles.admin)["user"],
         "details": {"was": {"max_running": 2}, "now": {"max_running": 3}}}]
