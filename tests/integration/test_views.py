"""The operator views of revision 0003 against real PostgreSQL: their answers, and their plans on a
table full of finished jobs (they must read queued, running and failed jobs through the partial
indexes, never scan the finished ones)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from pgq import Queue
from pgq.metrics import BacklogReader

from .conftest import SQL, expire_lease


def insert(db: SQL, **columns: Any) -> int:
    """Insert one job row as given (status-consistent columns are the caller's job); return its id."""
    columns.setdefault("kind", "k")
    names = ", ".join(columns)
    values = ", ".join(f"%({name})s" for name in columns)
    return int(db(f"INSERT INTO pgq.jobs ({names}) VALUES ({values}) RETURNING id", columns)[0]["id"])


def ago(db: SQL, seconds: float) -> dt.datetime:
    """The database clock minus `seconds`."""
    now: dt.datetime = db("SELECT now() AS t")[0]["t"]
    return now - dt.timedelta(seconds=seconds)


def running(db: SQL, *, started_s_ago: float, lease_s: float = 60, **columns: Any) -> int:
    """A running job started `started_s_ago` seconds ago whose lease ends `lease_s` from now."""
    return insert(db, status="running", started_at=ago(db, started_s_ago), lease_expires_at=ago(db, -lease_s),
                  lease_token="00000000-0000-0000-0000-000000000001", attempts=1, **columns)


def finished(db: SQL, status: str, *, finished_s_ago: float, run_s: float = 1.0, **columns: Any) -> int:
    """A finished job that ran `run_s` seconds and finished `finished_s_ago` seconds ago."""
    end = ago(db, finished_s_ago)
    return insert(db, status=status, finished_at=end, started_at=end - dt.timedelta(seconds=run_s), attempts=1,
                  **columns)


def test_queue_backlog_counts_ready_scheduled_running_and_age_of_oldest_ready(db: SQL, pgq_queue: Queue) -> None:
    insert(db, queue="a", run_at=ago(db, 90))
    insert(db, queue="a", run_at=ago(db, 5))
    insert(db, queue="a", run_at=ago(db, -600))  # scheduled
    pgq_queue.enqueue("k", queue="b")
    [claim] = pgq_queue.claim(worker="w", queues=["b"], limit=1, lease=60)
    pgq_queue.enqueue("k", queue="b")
    [expiring] = pgq_queue.claim(worker="w", queues=["b"], limit=1, lease=60)
    expire_lease(db, expiring.id)
    for status in ("succeeded", "failed", "cancelled"):
        finished(db, status, queue="c", finished_s_ago=10)

    rows = {r["queue"]: r for r in db("SELECT * FROM pgq.queue_backlog")}

    assert set(rows) == {"a", "b"}  # queue c holds only finished jobs
    a, b = rows["a"], rows["b"]
    assert (a["ready"], a["scheduled"], a["running"], a["expired_leases"]) == (2, 1, 0, 0)
    assert dt.timedelta(seconds=90) <= a["oldest_ready_age"] < dt.timedelta(seconds=100)
    assert a["next_run_at"] > ago(db, -599)
    assert (b["ready"], b["scheduled"], b["running"], b["expired_leases"]) == (0, 0, 2, 1)
    assert b["oldest_ready_age"] is None and b["oldest_ready_run_at"] is None
    assert claim.id != expiring.id


def test_backlog_reader_reads_the_view_for_its_queues_and_caches(db: SQL, pgq_dsn: str) -> None:
    insert(db, queue="a", run_at=ago(db, 30))
    insert(db, queue="b")
    reader = BacklogReader(pgq_dsn, queues=["a"], cache_seconds=3600)
    try:
        first = reader.read()
        insert(db, queue="a")
        second = reader.read()
    finally:
        reader.close()

    assert first.ok and [r["queue"] for r in first.rows] == ["a"]
    assert first.rows[0]["ready"] == 1 and 30 <= first.rows[0]["oldest_ready_age_s"] < 40
    assert second is first and reader.reads == 1  # within cache_seconds: no second query


def test_backlog_reader_on_unreachable_database_reports_not_ok() -> None:
    reader = BacklogReader("host=127.0.0.1 port=1 dbname=x", queues=None, connect_timeout=1)
    assert not reader.read().ok


def test_stuck_jobs_lists_expired_leases_long_runners_and_overdue_jobs(db: SQL) -> None:
    for n in range(25):  # the usual run time of q/k: about 1 s
        finished(db, "succeeded", queue="q", kind="k", finished_s_ago=60 + n, run_s=1.0 + n / 100)
    expired = running(db, queue="q", kind="k", started_s_ago=30, lease_s=-5, claimed_by="w1")
    long = running(db, queue="q", kind="k", started_s_ago=600, claimed_by="w2")
    running(db, queue="q", kind="k", started_s_ago=3)  # a bit slow, not stuck
    running(db, queue="q", kind="rare", started_s_ago=3600)  # no baseline: only its lease can tell
    overdue = insert(db, queue="q", run_at=ago(db, 600))
    insert(db, queue="q", run_at=ago(db, 60))  # due for a minute: just a backlog

    rows = {r["id"]: r for r in db("SELECT * FROM pgq.stuck_jobs")}

    assert {i: r["problem"] for i, r in rows.items()} == {
        expired: "lease expired", long: "running long", overdue: "overdue"}
    assert rows[long]["claimed_by"] == "w2"
    assert dt.timedelta(seconds=1) < rows[long]["usual_run_time"] < dt.timedelta(seconds=2)
    assert rows[long]["running_for"] >= dt.timedelta(seconds=600)


def test_failing_jobs_ranks_queue_kinds_by_failures_with_their_most_frequent_error(db: SQL) -> None:
    for _ in range(3):
        finished(db, "failed", queue="q", kind="a", finished_s_ago=60, last_error="ValueError: bad\n\nTraceback ...")
    finished(db, "failed", queue="q", kind="a", finished_s_ago=60, last_error="KeyError: 'x'\n\nTraceback ...")
    finished(db, "failed", queue="q", kind="a", finished_s_ago=7200, last_error="OldError")  # outside the hour
    insert(db, queue="q", kind="a", attempts=1, last_error="KeyError: 'x'\n\nTraceback ...")  # waiting to retry
    for n in range(2):
        insert(db, queue="q", kind="b", attempts=1,
               last_error=f"lease expired at 2026-01-0{n + 1} (attempt 1, worker w{n})")
    finished(db, "succeeded", queue="q", kind="c", finished_s_ago=10)
    insert(db, queue="q", kind="c")

    rows = db("SELECT * FROM pgq.failing_jobs")

    assert [(r["queue"], r["kind"], r["failed_last_hour"], r["retrying"], r["top_error"], r["top_error_count"],
             r["distinct_errors"]) for r in rows] == [
        ("q", "a", 4, 1, "ValueError: bad", 3, 2),
        ("q", "b", 0, 2, "lease expired", 2, 1),
    ]


def test_busy_workers_summarizes_running_jobs_per_worker(db: SQL) -> None:
    running(db, queue="q1", kind="x", started_s_ago=100, claimed_by="host-1")
    running(db, queue="q2", kind="y", started_s_ago=10, claimed_by="host-1")
    running(db, queue="q1", kind="x", started_s_ago=50, lease_s=-1, claimed_by="host-2")
    finished(db, "succeeded", queue="q1", finished_s_ago=1, claimed_by="host-3")

    rows = {r["worker"]: r for r in db("SELECT * FROM pgq.busy_workers")}

    assert set(rows) == {"host-1", "host-2"}
    one, two = rows["host-1"], rows["host-2"]
    assert (one["running"], one["expired_leases"], one["queues"], one["kinds"]) == (2, 0, ["q1", "q2"], ["x", "y"])
    assert one["longest_running_for"] >= dt.timedelta(seconds=100)
    assert (two["running"], two["expired_leases"]) == (1, 1)


@pytest.mark.parametrize("view", ["queue_backlog", "stuck_jobs", "failing_jobs", "busy_workers"])
def test_view_plan_never_scans_the_finished_jobs(db: SQL, view: str) -> None:
    db("""
        INSERT INTO pgq.jobs (queue, kind, status, started_at, finished_at, attempts)
        SELECT 'q' || (g % 3), 'k' || (g % 5), 'succeeded', now() - interval '2 s', now() - interval '1 s', 1
        FROM generate_series(1, 50000) g
    """)
    db("""
        INSERT INTO pgq.jobs (queue, kind, status, run_at, attempts, last_error)
        SELECT 'q' || (g % 3), 'k' || (g % 5), 'queued', now(), g % 2, CASE WHEN g % 2 = 1 THEN 'E' END
        FROM generate_series(1, 200) g
    """)
    db("ANALYZE pgq.jobs")

    plan = "\n".join(r["QUERY PLAN"] for r in db(f"EXPLAIN SELECT * FROM pgq.{view}"))

    assert "Seq Scan on jobs" not in plan, plan
    assert "Index" in plan, plan
