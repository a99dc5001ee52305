"""Bulk actions (revision 0013) need pgq's admin role: a producer or a worker is refused every one
(no UPDATE or DELETE on pgq.jobs, no INSERT on pgq.job_audit) and changes nothing; the admin's run is
recorded with its role."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

import pgq

from .conftest import Roles
from .test_roles import assert_refused, refused, rows, table_state


def test_only_the_admin_may_run_bulk_actions(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        failed = q.enqueue("k", queue="q", max_attempts=1)
        [claim] = q.claim(worker="w", queues=["q"])
        q.fail(claim, "boom")
        q.enqueue("k", queue="q")
    before = table_state(roles)
    for dsn in (roles.producer, roles.worker):
        with pgq.Queue(dsn) as q:
            assert q.retry_where(queue="q", dry_run=True).matched == 1  # reading is allowed
            refused(lambda: q.retry_where(queue="q"))
            refused(lambda: q.cancel_where(queue="q"))
            refused(lambda: q.delete_where(queue="q"))
        assert_refused(dsn, "INSERT INTO pgq.job_audit (action, job_ids) VALUES ('retry', '{1}')")
        assert_refused(dsn, "DELETE FROM pgq.job_audit")
    assert table_state(roles) == before
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    with pgq.Queue(roles.admin) as q:
        assert q.retry_where(queue="q").changed == 1
    [audit] = rows(roles.dsn, "SELECT db_role, job_ids FROM pgq.job_audit")
    assert audit == {"db_role": conninfo_to_dict(roles.admin)["user"], "job_ids": [failed]}
