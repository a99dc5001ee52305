"""The dashboard's reads (pgq.web.queries) on a real database: the hour's chart in minutes of the
database clock, its cap, the job search's windows and time budget, and the schedules' ticks."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from typing import Any, TypeVar

import pgq
from pgq import Queue, _sql
from pgq._ops import Operation
from pgq.models import JobStatus
from pgq.web import queries
from pgq.web.dashboard import Dashboard, Settings
from tests.conftest import SQL, enqueue_after

T = TypeVar("T")


def read(dsn: str, op: Operation[T]) -> T:
    """Run one dashboard read on `dsn` in a fresh event loop."""

    async def main() -> T:
        dash = Dashboard(dsn, Settings())
        try:
            return await dash.read(op)
        finally:
            await dash.close()

    return asyncio.run(main())


def finish(db: SQL, job_id: int, status: str, minutes_ago: float) -> None:
    """Make job `job_id` finished `minutes_ago` minutes before the database's now."""
    db("UPDATE pgq.jobs SET status = %s::pgq.job_status, finished_at = now() - make_interval(secs => %s) "
       "WHERE id = %s", [status, minutes_ago * 60, job_id])


def test_the_chart_counts_jobs_in_the_minutes_of_the_database_clock(pgq_dsn: str, pgq_queue: Queue,
                                                                    db: SQL) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k", "queue": "a" if i < 4 else "b"} for i in range(6)])
    db_now = db("SELECT now() AS now")[0]["now"]
    for job_id, (status, ago) in zip(ids, [("succeeded", 0), ("succeeded", 0), ("failed", 3), ("cancelled", 3),
                                           ("succeeded", 30), ("succeeded", 61)], strict=True):
        finish(db, job_id, status, ago)

    data = read(pgq_dsn, queries.overview())

    t = data.throughput
    assert abs((data.now - db_now).total_seconds()) < 30
    assert t.minutes[-1] == data.now.replace(second=0, microsecond=0)
    assert t.minutes[0] == t.minutes[-1] - dt.timedelta(minutes=59) == t.counted_from and not t.capped

    def at(minutes_ago: int) -> tuple[int, int, int]:
        i = 59 - minutes_ago
        return t.succeeded[i], t.failed[i], t.cancelled[i]

    # A minute boundary may pass between the updates and the read: allow the job one minute later.
    assert at(0)[0] + at(1)[0] >= 2
    assert sum(t.succeeded) == 3 and sum(t.failed) == 1 and sum(t.cancelled) == 1  # 61 minutes ago: not counted
    assert at(3)[1] + at(4)[1] == 1
    queues = {q.name: q for q in data.queues}
    assert (queues["a"].succeeded, queues["a"].failed, queues["a"].cancelled) == (2, 1, 1)
    assert queues["b"].succeeded == 1 and sum(queues["b"].per_minute) == 1
    assert sum(queues["a"].failed_per_minute) == 1


def test_the_queues_read_waiting_jobs_through_their_index_never_the_finished_ones(pgq_dsn: str, pgq_queue: Queue,
                                                                                  db: SQL) -> None:
    db("""
        INSERT INTO pgq.jobs (queue, kind, status, started_at, finished_at, attempts)
        SELECT 'q' || (g % 3), 'k', 'succeeded', now() - interval '2 h', now() - interval '2 h', 1
        FROM generate_series(1, 50000) g
    """)
    parent = pgq_queue.enqueue("fetch", queue="q0")
    enqueue_after(db, "merge", [parent], queue="q0")
    enqueue_after(db, "merge", [parent], queue="only-waiting")
    db("ANALYZE pgq.jobs")

    plan = "\n".join(r["QUERY PLAN"] for r in db("EXPLAIN " + _sql.query("dashboard_queues"), {"cap": 10}))
    # Since revision 0033 the finished jobs are in partitions of their own, which the overview never reads.
    assert "live_jobs" in plan and "finished_jobs" not in plan, plan
    queues = {q.name: q for q in read(pgq_dsn, queries.overview()).queues}
    assert (queues["q0"].waiting, queues["q0"].ready) == (1, 1)
    assert (queues["only-waiting"].waiting, queues["only-waiting"].ready) == (1, 0)


def test_a_busy_hour_is_counted_from_its_newest_jobs_up_to_the_cap(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k"} for _ in range(8)])
    for n, job_id in enumerate(ids):
        finish(db, job_id, "succeeded", 10 + 2 * n)  # 10, 12, ..., 24 minutes ago

    t = read(pgq_dsn, queries.overview(finished_cap=5)).throughput

    assert t.capped and sum(t.succeeded) == 5
    oldest_read = max(i for i, n in enumerate(t.succeeded[::-1]) if n)  # minutes ago of the oldest counted
    assert t.counted_from == t.minutes[59 - oldest_read + 1]


def test_job_search_windows_and_budget_list_every_match_once(pgq_dsn: str, pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "x" if i % 5 == 0 else "y"} for i in range(40)])
    wanted = [i for n, i in enumerate(ids) if n % 5 == 0][::-1]
    found: list[int] = []
    cursor: int | None = None
    empty_pages = 0
    for _ in range(100):
        page = read(pgq_dsn, queries.find_jobs(queries.JobFilter(kind="x"), before=cursor, limit=3, window=4,
                                               budget_s=0.0, empty_budget_s=0.0))
        found += [j["id"] for j in page.jobs]
        empty_pages += not page.jobs
        if page.next_cursor is None:
            break
        assert page.next_cursor < (cursor or 10**12)
        cursor = page.next_cursor
    assert found == wanted
    assert empty_pages > 0  # a zero budget stops after one window, matching or not


def test_job_search_on_an_empty_table_and_below_the_oldest_job(pgq_dsn: str, pgq_queue: Queue) -> None:
    assert read(pgq_dsn, queries.find_jobs(queries.JobFilter(), before=None, limit=10)).jobs == []
    job_id = pgq_queue.enqueue("k")
    page = read(pgq_dsn, queries.find_jobs(queries.JobFilter(status=JobStatus.QUEUED), before=None, limit=10))
    assert [j["id"] for j in page.jobs] == [job_id] and page.next_cursor is None
    assert read(pgq_dsn, queries.find_jobs(queries.JobFilter(), before=job_id, limit=10)).jobs == []


def test_schedules_show_the_next_tick_and_the_jobs_of_the_last_ones(pgq_dsn: str, db: SQL) -> None:
    app = pgq.App(pgq_dsn)

    @app.periodic(every=60, name="tidy", queue="maint")
    def tidy() -> None:
        pass

    (periodic,) = app.periodic_tasks
    now = db("SELECT now() AS now")[0]["now"]
    latest = periodic.schedule.latest(now - dt.timedelta(hours=1), now)
    assert latest is not None
    previous = latest - dt.timedelta(seconds=60)
    db("SELECT pgq.enqueue('tidy', '{}', 'maint', 0, NULL, %s)", [periodic.dedupe_key(latest)])
    old = db("SELECT pgq.enqueue('tidy', '{}', 'maint', 0, NULL, %s) AS id", [periodic.dedupe_key(previous)])[0]["id"]
    db("UPDATE pgq.jobs SET status = 'failed', finished_at = now() WHERE id = %s", [old])

    read_now, rows = read(pgq_dsn, queries.schedules(app.periodic_tasks))

    (row,) = rows
    assert row.next_tick is not None and read_now < row.next_tick <= read_now + dt.timedelta(seconds=60)
    ticks: list[tuple[dt.datetime, dict[str, Any] | None]] = row.ticks
    assert len(ticks) == queries.TICKS_SHOWN and ticks[0][0] >= latest
    statuses = {tick: (job or {}).get("status") for tick, job in ticks}
    assert statuses[latest] == "queued" and statuses[previous] == "failed"
    assert statuses[previous - dt.timedelta(seconds=60)] is None


def test_rights_of_the_owner(pgq_dsn: str) -> None:
    rights = read(pgq_dsn, queries.rights())
    assert rights.change_jobs and rights.pause and rights.refusal("cancel") is None
    refused = queries.Rights("someone", change_jobs=False, pause=False)
    assert "someone" in (refused.refusal("retry") or "") and "pause" in (refused.refusal("resume") or "")


def test_times_are_utc_whatever_the_session_time_zone(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    # A caller's AsyncQueue may bring a pool whose sessions are in another zone.
    import psycopg

    from pgq import _ops

    finish(db, pgq_queue.enqueue("k"), "succeeded", 0)

    async def main() -> queries.Overview:
        conn = await psycopg.AsyncConnection.connect(pgq_dsn, autocommit=True, options="-c TimeZone=Asia/Kolkata")
        async with conn:
            return await _ops.run_async(conn, queries.overview(), own_transaction=True)

    data = asyncio.run(main())
    assert data.now.utcoffset() == dt.timedelta(0)
    assert all(m.utcoffset() == dt.timedelta(0) for m in data.throughput.minutes)
    assert sum(data.throughput.succeeded) == 1


def test_dead_letter_groups_read_the_newest_failed_jobs_only(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    """Issue #44: the groups of the jobs page's failed filter come from the newest `scan` failed jobs
    (of the queue when given), then filtered by kind, and say how many they read; before, every
    failed job was read (8.7 s at 10,000,000 finished jobs)."""
    ids = pgq_queue.enqueue_many([pgq.JobSpec("a" if n % 2 else "b", queue="q1" if n < 6 else "q2")
                                  for n in range(10)])
    for n, job_id in enumerate(ids):  # job n failed 100 - n minutes ago: the later ids are newer
        finish(db, job_id, "failed", 100 - n)
        db("UPDATE pgq.jobs SET last_error = %s WHERE id = %s", [f"E{n % 3}: boom\ntrace", job_id])

    def groups(queue: str | None, kind: str | None, scan: int) -> set[tuple[str, str, int, int]]:
        rows = read(pgq_dsn, queries.failed_groups(queue, kind, scan))
        return {(r["kind"], r["error"], r["jobs"], r["scanned"]) for r in rows}

    # The newest 4 of all: jobs 6..9 (q2), across queues.
    assert groups(None, None, 4) == {("b", "E0: boom", 1, 4), ("a", "E1: boom", 1, 4), ("b", "E2: boom", 1, 4),
                                     ("a", "E0: boom", 1, 4)}
    # The newest 3 of q1 (jobs 3, 4, 5), then kind a among them (3 and 5).
    assert groups("q1", "a", 3) == {("a", "E0: boom", 1, 3), ("a", "E2: boom", 1, 3)}
    # Everything when the bound is not reached.
    assert sum(g[2] for g in groups(None, None, 100)) == 10
    assert {g[3] for g in groups(None, None, 100)} == {10}


def test_the_failed_list_reads_failed_jobs_in_id_order_and_stops_at_the_page(pgq_dsn: str, pgq_queue: Queue,
                                                                               db: SQL) -> None:
    """Issue #44 (revision 0029): behind more queued jobs than the first window of ids holds, the failed
    list is read backwards through jobs_failed_id_idx and stops at the page; before, every failed job
    was read through jobs_failed_idx and sorted (4.4 s at 10,000,000 finished jobs)."""
    failed = pgq_queue.enqueue_many([pgq.JobSpec("f", queue="q") for _ in range(120)])
    for job_id in failed:
        finish(db, job_id, "failed", 5)
    pgq_queue.enqueue_many([pgq.JobSpec("w", queue="q") for _ in range(30)])  # newer ids, queued
    db("ANALYZE pgq.jobs")
    page = read(pgq_dsn, queries.find_jobs(queries.JobFilter(status=JobStatus.FAILED), before=None, window=10,
                                           limit=50))
    assert [j["id"] for j in page.jobs] == sorted(failed, reverse=True)[:50]
    params = {"status": "failed", "queue": None, "kind": None, "text": None, "payload": None, "error_line": None,
              "high": max(failed) + 1, "limit": 50}
    # Since revision 0033 each day's partition of finished jobs has its own copy of the index. These
    # partitions are small enough here that a scan and a sort cost less: the plan must still exist.
    db("SET enable_seqscan = off")
    db("SET enable_bitmapscan = off")
    plan = db("EXPLAIN (FORMAT JSON) " + _sql.query("dashboard_jobs_failed"), params)[0]["QUERY PLAN"]
    db("RESET enable_seqscan")
    db("RESET enable_bitmapscan")
    used = set(re.findall(r"""['"]Index Name['"]: ['"]([^'"]+)['"]""", str(plan)))
    failed_ids = {r["indexname"] for r in db("SELECT indexname FROM pg_indexes WHERE schemaname = 'pgq' "
                                             "AND indexdef LIKE '%%(id) WHERE ((status = ''failed''%%'")}
    assert used and used <= failed_ids and not re.search(r"""Node Type['"]: ['"]Sort""", str(plan)), plan


def test_the_queues_count_ready_scheduled_and_retrying_and_cap_the_unknown_kind(pgq_dsn: str, pgq_queue: Queue,
                                                                               db: SQL) -> None:
    """Issue #44: the backlog's counts are exact (ready is queued minus scheduled; the oldest ready
    job's age only where one is due), and the jobs handed back for an unknown kind are counted up to
    the cap per queue, as the unknown kinds are, and say so beyond it."""
    pgq_queue.enqueue_many([{"kind": "k", "queue": "due"} for _ in range(3)])
    pgq_queue.enqueue("k", queue="due", delay=600)
    pgq_queue.enqueue("k", queue="later", delay=600)
    handed = pgq_queue.enqueue_many([{"kind": "legacy", "queue": "orphan"} for _ in range(5)])
    other = pgq_queue.enqueue("k", queue="orphan")
    db("UPDATE pgq.jobs SET last_error = 'no worker of queue orphan knows kind legacy (worker w-1)' "
       "WHERE id = ANY(%s)", [handed])
    db("UPDATE pgq.jobs SET last_error = 'ConnectionError: reset', attempts = 1 WHERE id = %s", [other])

    def rows(cap: int) -> dict[str, dict[str, Any]]:
        return {r["queue"]: r for r in db(_sql.query("dashboard_queues"), {"cap": cap})}

    exact = rows(10)
    assert [(q, exact[q]["ready"], exact[q]["scheduled"]) for q in ("due", "later", "orphan")] == [
        ("due", 3, 1), ("later", 0, 1), ("orphan", 6, 0)]
    assert exact["due"]["oldest_ready_age_s"] >= 0 and exact["later"]["oldest_ready_age_s"] is None
    assert exact["later"]["next_run_at"] is not None and exact["due"]["next_run_at"] is not None
    assert (exact["orphan"]["retrying"], exact["orphan"]["unknown_kind"], exact["orphan"]["unknown_kind_capped"]) == (
        6, 5, False)
    capped = rows(3)["orphan"]
    assert (capped["retrying"], capped["unknown_kind"], capped["unknown_kind_capped"]) == (6, 3, True)
    summary = {q.name: q for q in read(pgq_dsn, queries.overview()).queues}["orphan"]
    assert (summary.unknown_kind, summary.unknown_kind_capped) == (5, False)


def test_the_overview_counts_busy_workers_across_queues_in_its_queues_statement(pgq_dsn: str, pgq_queue: Queue,
                                                                                db: SQL) -> None:
    pgq_queue.enqueue_many([{"kind": "k", "queue": q} for q in ("a", "a", "b")])
    pgq_queue.claim(worker="w1", queues=["a"], limit=1)
    pgq_queue.claim(worker="w1", queues=["b"], limit=1)
    pgq_queue.claim(worker="w2", queues=["a"], limit=1)
    data = read(pgq_dsn, queries.overview())
    assert data.workers == 2  # w1 runs jobs of two queues: one busy worker
    assert {q.name: q.workers for q in data.queues} == {"a": 2, "b": 1}
    assert data.rights.change_jobs and data.rights.pause  # read by the same first statement as the clock
