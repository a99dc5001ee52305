"""A lease token is a secret of the session that claimed the attempt (issue 40, finding 1).

The fencing token only fences while no one else can learn it: a second session of the worker role
used to read an honest worker's token from pgq.jobs and finish its job with a forged result. Now
no pgq role but the admin can read pgq.jobs.lease_token, no view or function a producer or worker
may call returns it, and the client sends every token as a bind parameter, so that it never shows
in pg_stat_activity.query, which other sessions of the same login role can read."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import pgq
from pgq import _ops

from ..worker.conftest import wait_for
from .conftest import Roles
from .test_roles import assert_refused, rows, table_state


def _running(roles: Roles) -> tuple[int, str]:
    """An honest worker's running job, claimed through the worker role: its id and token."""
    with pgq.Queue(roles.producer) as p:
        job_id = p.enqueue("k", {"n": 1}, queue="q")
    with pgq.Queue(roles.worker) as w:
        [claim] = w.claim(worker="honest", queues=["q"], limit=1, lease=60)
    return job_id, claim.token


def test_a_second_worker_session_cannot_read_the_token_and_finish_the_job(roles: Roles) -> None:
    job_id, token = _running(roles)
    before = table_state(roles)
    for dsn in (roles.worker, roles.producer):
        assert_refused(dsn, "SELECT lease_token FROM pgq.jobs WHERE id = %s", [job_id])
        assert_refused(dsn, "SELECT * FROM pgq.jobs WHERE id = %s", [job_id])
        assert_refused(dsn, "SELECT to_jsonb(j) FROM pgq.jobs j WHERE id = %s", [job_id])
        assert_refused(dsn, "SELECT id FROM pgq.jobs WHERE lease_token IS NOT NULL")
    assert table_state(roles) == before
    assert rows(roles.dsn, "SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [{"status": "running"}]
    assert rows(roles.admin, "SELECT lease_token::text FROM pgq.jobs WHERE id = %s", [job_id]) == [
        {"lease_token": token}]


def _texts(found: list[dict[str, Any]]) -> str:
    return repr(found)


def test_no_view_or_function_a_producer_or_worker_may_call_returns_a_live_token(roles: Roles) -> None:
    job_id, token = _running(roles)
    views = [r["v"] for r in rows(roles.dsn, "SELECT c.relname AS v FROM pg_class c WHERE c.relkind = 'v' "
                                             "AND c.relnamespace = 'pgq'::regnamespace ORDER BY 1")]
    assert "running_jobs" in views
    for dsn in (roles.worker, roles.producer):
        for view in views:
            assert token not in _texts(rows(dsn, f"SELECT * FROM pgq.{view}")), view
        with pgq.Queue(dsn) as q:
            job = q.get(job_id)
            assert job is not None and job.status is pgq.JobStatus.RUNNING and job.lease_token is None
            listed = q.list(status="running")
            assert [j.id for j in listed] == [job_id] and listed[0].lease_token is None
        # Marking it awaited (Queue.wait) returns the row without its token.
        marked = rows(dsn, "SELECT * FROM pgq.mark_awaited(%s)", [job_id])
        assert token not in _texts(marked)
        assert token not in _texts(rows(dsn, "SELECT * FROM pgq.explain(%s)", [job_id]))


def test_the_workers_lease_check_tells_lost_leases_without_reading_tokens(roles: Roles) -> None:
    """What a worker without LISTEN asks every poll (sql/job_lease_check.sql): only whether the
    tokens it holds still hold, through pgq.leases_lost."""
    job_id, token = _running(roles)
    assert rows(roles.worker, "SELECT * FROM pgq.leases_lost(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])",
                [job_id, token]) == []
    assert rows(roles.worker, "SELECT * FROM pgq.leases_lost(ARRAY[%s]::bigint[], ARRAY[gen_random_uuid()])",
                [job_id]) == [{"id": job_id, "cancelled": False}]
    assert_refused(roles.producer, "SELECT * FROM pgq.leases_lost(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])",
                   [job_id, token])
    with pgq.Queue(roles.worker) as w:
        with pgq.Queue(roles.producer) as p:
            other = p.enqueue("k", queue="q2")
        [mine] = w.claim(worker="w", queues=["q2"], limit=1)
        assert mine.id == other
        assert w._run(_ops.lease_check([mine])) == {}
        rows(roles.dsn, "SELECT * FROM pgq.cancel(%s)", [other])
        assert w._run(_ops.lease_check([mine])) == {other: "cancelled"}


@pytest.mark.parametrize("pgbouncer", [False, True], ids=["direct", "pgbouncer-mode"])
@pytest.mark.parametrize("ack", ["complete", "heartbeat", "fail"])
def test_tokens_never_show_in_pg_stat_activity(roles: Roles, ack: str, pgbouncer: bool) -> None:
    """A worker's acknowledgement waits on a row lock (held by an operator's session) while a second
    session of the same login role reads every query it may see: the token is not in any."""
    with pgq.Queue(roles.producer) as p:
        job_id = p.enqueue("k", queue="mine")
    errors: list[BaseException] = []
    with pgq.Queue(roles.worker, pgbouncer=pgbouncer) as acker:
        [mine] = acker.claim(worker="w", queues=["mine"], limit=1)
        assert mine.id == job_id
        with psycopg.connect(roles.dsn) as locker:
            locker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", [job_id])

            def run() -> None:
                try:
                    if ack == "complete":
                        acker.complete(mine, {"ok": True})
                    elif ack == "heartbeat":
                        acker.heartbeat([mine], lease=30)
                    else:
                        acker.fail(mine, "boom")
                except BaseException as exc:  # reported below
                    errors.append(exc)

            thread = threading.Thread(target=run)
            thread.start()
            seen: list[str] = []

            def waiting() -> bool:
                seen[:] = [r["query"] for r in rows(
                    roles.worker, "SELECT query FROM pg_stat_activity WHERE usename = current_user "
                                  "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'")]
                return bool(seen)

            wait_for(waiting, 10, "the acknowledgement to wait on the row lock")
            assert any(f"pgq.{ack}" in q for q in seen), seen
            assert not any(mine.token in q for q in seen), seen
            locker.rollback()
            thread.join(10)
    assert not errors, errors
    assert rows(roles.dsn, "SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [
        {"status": {"complete": "succeeded", "heartbeat": "running", "fail": "queued"}[ack]}]
