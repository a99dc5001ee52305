"""Exact counts of finished jobs (issue #44, revision 0026): pgq.finished_counts, kept by the maintenance
loop's pass (pgq.count_finished), read by the overview, the queue page, `/api/queues` and
`/api/throughput`: exact whatever the table size, after retention, after a burst, with late commits,
with two workers counting at once, and over a day and a week."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import psycopg
import pytest

from pgq import AsyncQueue, _ops
from pgq.web import queries
from pgq.worker.maintenance import Counter
from tests.conftest import SQL

from .conftest import Client
from .test_queries import read


def count_pass(db: SQL, recount: str = "2 minutes", span: str = "400 days") -> Any:
    """One pass of the counts, as the workers run it; its value (the end of the minutes counted)."""
    return db("SELECT pgq.count_finished(%s::interval, %s::interval) AS through", [recount, span])[0]["through"]


def insert_finished(db: SQL, n: int, *, ago_s: float, spread_s: float = 0.0, queue: str = "q", kind: str = "k",
                    status: str = "succeeded") -> None:
    """`n` jobs of `queue` and `kind` that finished with `status` from `ago_s` seconds before now, over
    `spread_s` seconds towards now."""
    db("""
        INSERT INTO pgq.jobs (queue, kind, status, attempts, started_at, finished_at)
        SELECT %(queue)s, %(kind)s, %(status)s::pgq.job_status, 1, f.at, f.at
        FROM generate_series(1, %(n)s) g
        CROSS JOIN LATERAL (SELECT now() - make_interval(secs => %(ago)s) + make_interval(secs => %(spread)s)
                                   * (g - 1)::float8 / greatest(%(n)s - 1, 1) AS at) f
    """, {"queue": queue, "kind": kind, "status": status, "n": n, "ago": ago_s, "spread": spread_s})


def sql_count(db: SQL, since: str, status: str | None = None) -> int:
    """What SQL counts among the jobs themselves: finished since `since` (an expression)."""
    rows = db(f"SELECT count(*) AS n FROM pgq.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') "
              f"AND finished_at >= {since} AND (%s::text IS NULL OR status::text = %s)", [status, status])
    return int(rows[0]["n"])


HOUR = "date_bin('1 minute', now(), '2000-01-01 00:00:00+00') - interval '59 minutes'"


def totals(t: queries.Throughput) -> tuple[int, int, int]:
    return sum(t.succeeded), sum(t.failed), sum(t.cancelled)


def test_the_counts_stay_exact_after_retention_deletes_the_jobs(pgq_dsn: str, db: SQL) -> None:
    insert_finished(db, 300, ago_s=50 * 60, spread_s=30 * 60)
    insert_finished(db, 40, ago_s=40 * 60, status="failed", queue="mail", kind="send")
    insert_finished(db, 7, ago_s=20, queue="mail", kind="send")  # the current minutes: not counted by a pass yet
    before = read(pgq_dsn, queries.overview())
    assert totals(before.throughput) == (307, 40, 0) and not before.throughput.capped
    assert count_pass(db) is not None

    # Retention deletes every finished job, those of the minutes a pass counts again too.
    deleted = asyncio.run(_purge(pgq_dsn))
    assert deleted == 347 and sql_count(db, "'-infinity'") == 0

    after = read(pgq_dsn, queries.overview())
    assert totals(after.throughput) == (307, 40, 0)
    count_pass(db)  # the next pass counts the recent minutes again: the deleted ones stay counted
    again = read(pgq_dsn, queries.overview())
    assert totals(again.throughput) == (307, 40, 0)
    mail = {q.name: q for q in again.queues}["mail"]
    assert (mail.succeeded, mail.failed) == (7, 40) and mail.kinds == {"send": {"succeeded": 7, "failed": 40,
                                                                                 "cancelled": 0}}
    assert mail.day == {"succeeded": 7, "failed": 40, "cancelled": 0}


async def _purge(dsn: str) -> int:
    deleted = 0
    async with AsyncQueue(dsn) as queue:
        while True:
            run = await queue._run(_ops.purge_as_leader("retention", 0.0, 100))
            assert run.value is not None
            deleted += run.value
            if run.value < 100:
                return deleted


def test_after_a_burst_the_hours_failed_count_equals_sqls(pgq_dsn: str, db: SQL, dashboard: Client) -> None:
    # The operator's case: 380 failed jobs, then a burst of more finished jobs than the old cap read.
    insert_finished(db, 380, ago_s=50 * 60, spread_s=60, queue="mail", status="failed")
    insert_finished(db, 60_000, ago_s=30 * 60, spread_s=25 * 60)
    db("ANALYZE pgq.jobs")
    unkept = read(pgq_dsn, queries.overview())
    assert unkept.throughput.capped  # no pass yet: the newest FINISHED_CAP only, and said so

    count_pass(db)
    data = read(pgq_dsn, queries.overview())
    assert not data.throughput.capped
    assert sum(data.throughput.failed) == sql_count(db, HOUR, "failed") == 380
    assert sum(data.throughput.succeeded) == sql_count(db, HOUR, "succeeded") == 60_000
    body = dashboard().get("/api/queues").json()
    mail = next(q for q in body["queues"] if q["name"] == "mail")
    assert mail["last_hour"]["failed"] == 380 and mail["last_24h"]["failed"] == 380
    assert body["last_hour_partial"] is False and body["counts"]["kept_through"] is not None
    page = dashboard().get("/")
    assert page.status_code == 200 and 'id="counts-partial"' not in page.text and "Exact counts" in page.text
    queue = dashboard().get("/api/queues/mail").json()
    assert queue["last_hour"]["failed"] == queue["last_24h"]["failed"] == 380
    assert queue["last_hour"]["kinds"] == {"k": {"succeeded": 0, "failed": 380, "cancelled": 0}}
    assert "Exact counts" in dashboard().get("/queues/mail").text


def test_a_finish_that_commits_after_the_pass_is_counted_by_the_next(pgq_dsn: str, db: SQL) -> None:
    insert_finished(db, 5, ago_s=10 * 60)
    (job,) = [r["id"] for r in db("INSERT INTO pgq.jobs (kind, queue, status, attempts) "
                                  "VALUES ('k', 'q', 'queued', 1), ('k', 'q', 'queued', 1) RETURNING id")][:1]
    late = psycopg.connect(pgq_dsn)
    try:
        # A transaction that finished the job a minute ago (its now()) and commits only after a pass.
        late.execute(b"UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() - interval '1 minute' "
                     b"WHERE id = %s", [job])
        count_pass(db)
        assert totals(read(pgq_dsn, queries.overview()).throughput) == (5, 0, 0)
        late.commit()
    finally:
        late.close()
    count_pass(db)
    assert totals(read(pgq_dsn, queries.overview()).throughput) == (6, 0, 0) == (sql_count(db, HOUR), 0, 0)

    # The bound: a finish committed later than the recount window after its finished_at is not counted.
    db("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() - interval '10 minutes' "
       "WHERE status = 'queued'")
    count_pass(db)
    assert sum(read(pgq_dsn, queries.overview()).throughput.succeeded) == 6 == sql_count(db, HOUR) - 1


def test_two_workers_counting_at_once_count_each_job_once(pgq_dsn: str, db: SQL) -> None:
    insert_finished(db, 1000, ago_s=45 * 60, spread_s=44 * 60)
    holder = psycopg.connect(pgq_dsn)
    try:
        assert holder.execute(b"SELECT pgq.count_finished('2 minutes', '1 day')").fetchone() != (None,)
        # The lock is held until the holder commits: a second pass returns at once, having done nothing.
        assert count_pass(db) is None
        holder.commit()
    finally:
        holder.close()

    errors: list[BaseException] = []

    def passes() -> None:
        try:
            with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                for _ in range(15):
                    conn.execute(b"SELECT pgq.count_finished('5 minutes', '1 day')")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=passes) for _ in range(4)]
    for t in threads:
        t.start()
    insert_finished(db, 50, ago_s=30)
    for t in threads:
        t.join()
    assert not errors
    count_pass(db)
    kept = db("SELECT sum(jobs) AS n FROM pgq.finished_counts")[0]["n"]
    assert kept == sql_count(db, "'-infinity'") - db(
        "SELECT count(*) AS n FROM pgq.jobs WHERE finished_at >= (SELECT counted_through "
        "FROM pgq.finished_counts_state)")[0]["n"]
    assert totals(read(pgq_dsn, queries.overview()).throughput) == (1050, 0, 0)


def test_the_maintenance_step_counts_as_one_worker_at_a_time(pgq_dsn: str, db: SQL) -> None:
    insert_finished(db, 12, ago_s=3 * 3600)

    async def main() -> list[bool]:
        async with AsyncQueue(pgq_dsn) as queue:
            return [r.leader for r in await asyncio.gather(Counter(queue).run_once(), Counter(queue).run_once())]

    assert True in asyncio.run(main())
    assert db("SELECT sum(jobs) AS n FROM pgq.finished_counts")[0]["n"] == 12


def test_the_charts_over_a_day_and_a_week(pgq_dsn: str, db: SQL, dashboard: Client) -> None:
    insert_finished(db, 30, ago_s=3 * 3600, queue="mail")
    insert_finished(db, 4, ago_s=3 * 3600, queue="reports", status="failed")
    insert_finished(db, 20, ago_s=2 * 86400)
    insert_finished(db, 9, ago_s=8 * 86400)  # older than the week
    insert_finished(db, 2, ago_s=5)
    count_pass(db)
    client = dashboard()

    day = client.get("/api/throughput?range=24h").json()
    assert day["bucket_s"] == 900 and len(day["buckets"]) == len(day["succeeded"]) == 96
    assert (sum(day["succeeded"]), sum(day["failed"])) == (32, 4) and day["partial"] is False
    first, last = (dt.datetime.fromisoformat(day["buckets"][i]) for i in (0, -1))
    assert last - first == dt.timedelta(minutes=15 * 95)
    week = client.get("/api/throughput?range=7d").json()
    assert week["bucket_s"] == 3600 and len(week["buckets"]) == 168
    assert (sum(week["succeeded"]), sum(week["failed"])) == (52, 4)
    mail = client.get("/api/throughput?range=7d&queue=mail").json()
    assert (sum(mail["succeeded"]), sum(mail["failed"])) == (30, 0)
    hour = client.get("/api/throughput").json()
    assert hour["bucket_s"] == 60 and sum(hour["succeeded"]) == 2
    assert client.get("/api/throughput?range=1y").status_code == 400
    # Minutes older than 8 days live on in their hours only.
    assert db("SELECT count(*) AS n FROM pgq.finished_counts WHERE minute < now() - interval '8 days'")[0]["n"] == 0
    uncounted = db("SELECT count(*) AS n FROM pgq.jobs "
                   "WHERE finished_at >= (SELECT counted_through FROM pgq.finished_counts_state)")[0]["n"]
    assert db("SELECT sum(jobs) AS n FROM pgq.finished_counts_hourly")[0]["n"] == 65 - uncounted

    for key in ("24h", "7d"):
        page = client.get(f"/?range={key}")
        assert page.status_code == 200 and f'<strong data-range="{key}">' in page.text
    assert "Jobs finished per quarter hour" in client.get("/?range=24h").text
    assert "Jobs finished per hour" in client.get("/?range=7d").text


@pytest.mark.parametrize("recount, span", [("-1 minute", "1 day"), ("2 minutes", "30 seconds"), (None, "1 day")])
def test_count_finished_refuses_bad_windows(db: SQL, recount: str | None, span: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db("SELECT pgq.count_finished(%s::interval, %s::interval)", [recount, span])


def test_the_first_passes_count_a_long_history_a_span_at_a_time(pgq_dsn: str, db: SQL, dashboard: Client) -> None:
    insert_finished(db, 1000, ago_s=10 * 86400, spread_s=10 * 86400 - 600)
    passes = 0
    while True:
        passes += 1
        through = count_pass(db, span="6 hours")
        if through > db("SELECT now() - interval '1 minute' AS m")[0]["m"] or passes > 60:
            break
    assert 40 <= passes <= 42
    assert db("SELECT sum(jobs) AS n FROM pgq.finished_counts_hourly")[0]["n"] == 1000
    assert db("SELECT count(*) AS n FROM pgq.finished_counts WHERE minute < now() - interval '8 days'")[0]["n"] == 0
    week = dashboard().get("/api/throughput?range=7d").json()
    assert sum(week["succeeded"]) == sql_count(db, "date_bin('1 hour', now(), '2000-01-01 00:00:00+00') "
                                                   "- interval '167 hours'")
