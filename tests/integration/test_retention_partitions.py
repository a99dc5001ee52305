"""Retention by partition (issue #43, revision 0033): `purge` drops the day partitions of finished jobs
whose whole UTC day is past the horizon (pgq.finished_partitions_drop), then deletes the rest row by
row; a dropped day keeps what the row triggers of a delete keep (counts, key finishes, edges), a day
with a failed job holding its sequence is left to the row deletes, and the partitions of the coming
days are made ahead (by `purge` and the workers' maintenance)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import psycopg
import pytest

from pgq import AsyncQueue, Queue, _ops
from pgq.worker.maintenance import PartitionMaker, Retention

from ..conftest import SQL

PAST = """
ALTER TABLE pgq.finished_jobs DETACH PARTITION pgq.finished_jobs_before_0033;
ALTER TABLE pgq.finished_jobs_before_0033 ADD CONSTRAINT finished_jobs_before_0033_bound
    CHECK (status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
           AND finished_at < '2000-01-01 00:00:00+00');
ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.finished_jobs_before_0033
    FOR VALUES FROM (MINVALUE) TO ('2000-01-01 00:00:00+00');
ALTER TABLE pgq.finished_jobs_before_0033 DROP CONSTRAINT finished_jobs_before_0033_bound;
"""

DAY = """
DO $$
DECLARE
    day date := (statement_timestamp() AT TIME ZONE 'UTC')::date - BACK;
    part text := 'finished_jobs_' || to_char(day, 'YYYYMMDD');
BEGIN
    EXECUTE format('CREATE TABLE pgq.%I (LIKE pgq.finished_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    EXECUTE format('CREATE INDEX %I ON pgq.%I (id)', part || '_job_id_idx', part);
    EXECUTE format('ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.%I FOR VALUES FROM (%L) TO (%L)',
                   part, day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
END
$$
"""


def past_days(db: SQL, *back: int) -> None:
    """Make the (empty) partition of the jobs finished before revision 0033 end in 2000, and attach a day
    partition for each of the days `back` days before today (UTC), as pgq.finished_partitions_ensure
    would have made them then."""
    for stmt in PAST.split(";"):
        if stmt.strip():
            db(stmt)
    for b in back:
        db(DAY.replace("BACK", str(int(b))))


def finished(db: SQL, n: int, back: int, *, hour: float = 12, key: str | None = None, status: str = "succeeded",
             kind: str = "k", pending_parents: int | None = None, sequence_key: str | None = None) -> list[int]:
    """Insert `n` jobs that finished `back` days before today (UTC) at `hour` (as the history's rows);
    their ids."""
    rows = db(
        "INSERT INTO pgq.finished_jobs (kind, status, finished_at, dedupe_key, pending_parents, sequence_key)"
        " SELECT %s, %s::pgq.job_status,"
        " ((statement_timestamp() AT TIME ZONE 'UTC')::date - %s::integer)::timestamp AT TIME ZONE 'UTC'"
        " + make_interval(secs => %s * 3600), %s, %s, %s"
        " FROM generate_series(1, %s) RETURNING id",
        [kind, status, back, hour, key, pending_parents, sequence_key, n])
    return [r["id"] for r in rows]


def partitions(db: SQL) -> list[str]:
    return [r["p"] for r in db("SELECT c.relname AS p FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                               " WHERE i.inhparent = 'pgq.finished_jobs'::regclass ORDER BY 1")]


def day_name(back: int) -> str:
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=back)
    return "finished_jobs_" + day.strftime("%Y%m%d")


def test_purge_drops_whole_days_past_the_horizon_and_deletes_the_rest_row_by_row(pgq_queue: Queue,
                                                                                 db: SQL) -> None:
    past_days(db, 1, 2, 3, 5)  # no partition for 4 days ago: its jobs are in the default one
    for back in (1, 2, 3, 4, 5):
        finished(db, 10, back)  # at noon of each day
    assert db("SELECT count(*) AS n FROM pgq.finished_jobs_default") == [{"n": 10}]
    report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=2)))
    # Days ending at or before now - 2 days: 3 and 5 days ago (dropped), 2 days ago ends later.
    assert report.dropped == ((day_name(5), 10), (day_name(3), 10))
    assert report.skipped == ()
    # Row by row: 4 days ago (default partition), and 2 days ago (the day across the horizon) when its
    # noon is past the horizon (after noon UTC today).
    straddling = 10 if dt.datetime.now(dt.UTC).hour >= 12 else 0
    assert report.deleted == 10 + straddling
    assert report.jobs == 30 + straddling
    assert day_name(5) not in partitions(db) and day_name(3) not in partitions(db)
    assert day_name(2) in partitions(db)
    assert db("SELECT count(*) AS n FROM pgq.finished_jobs") == [{"n": 20 - straddling}]
    # Nothing left to do; the partitions of the coming week exist.
    assert pgq_queue.purge(dt.timedelta(days=2)) == 0
    today = dt.datetime.now(dt.UTC).date()
    for ahead in range(8):
        assert "finished_jobs_" + (today + dt.timedelta(days=ahead)).strftime("%Y%m%d") in partitions(db)


def test_a_day_with_a_failed_job_holding_its_sequence_is_left_to_the_row_deletes(pgq_queue: Queue,
                                                                                 db: SQL) -> None:
    past_days(db, 3, 4)
    [held] = finished(db, 1, 3, status="failed", sequence_key="s")
    others = finished(db, 5, 3)
    finished(db, 5, 4)
    waiting = pgq_queue.enqueue("next")
    db("UPDATE pgq.live_jobs SET status = 'waiting', pending_parents = 1 WHERE id = %s", [waiting])
    db("INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome, sequence_hold)"
       " VALUES (%s, %s, false, NULL, true)", [waiting, held])
    report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
    assert report.dropped == ((day_name(4), 5),)
    assert report.skipped == ((day_name(3), "held"),)
    assert report.deleted == 5
    left = db("SELECT id FROM pgq.finished_jobs ORDER BY id")
    assert [r["id"] for r in left] == [held] and not set(others) & {r["id"] for r in left}
    # Once the job no longer holds its sequence, its day goes whole.
    db("UPDATE pgq.job_dependencies SET parent_outcome = 'failed' WHERE parent_id = %s", [held])
    report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
    assert report.dropped == ((day_name(3), 1),) and report.deleted == 0


def test_a_dropped_day_keeps_its_edges_tails_and_key_finishes_as_row_deletes_do(pgq_queue: Queue,
                                                                              db: SQL) -> None:
    past_days(db, 3)
    [child] = finished(db, 1, 3, pending_parents=0)
    [parent] = finished(db, 1, 3, hour=11)
    db("INSERT INTO pgq.job_dependencies (job_id, parent_id, needs_success, parent_outcome)"
       " VALUES (%s, %s, true, 'succeeded')", [child, parent])
    [tail] = finished(db, 1, 3, sequence_key="seq")
    db("INSERT INTO pgq.sequence_tails (queue, sequence_key, job_id) VALUES ('default', 'seq', %s)", [tail])
    keyed = finished(db, 3, 3, key="key-a")
    db("INSERT INTO pgq.key_finishes (queue, dedupe_key, job_id, finished_at)"
       " VALUES ('default', 'stale', 1, now() - interval '40 days')")
    report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
    assert report.dropped == ((day_name(3), 6),)
    assert db("SELECT count(*) AS n FROM pgq.job_dependencies") == [{"n": 0}]
    assert db("SELECT count(*) AS n FROM pgq.sequence_tails") == [{"n": 0}]
    finishes = db("SELECT dedupe_key, job_id FROM pgq.key_finishes ORDER BY 1")
    assert [f["dedupe_key"] for f in finishes] == ["key-a"] and finishes[0]["job_id"] in keyed


def _counted(db: SQL) -> int:
    # What the dashboard shows for all time: the hours (and the minutes of the hours not summed yet).
    db("SELECT pgq.count_finished('2 minutes', '30 days')")
    return int(db("SELECT coalesce(sum(jobs), 0) AS n FROM pgq.finished_counts_hourly")[0]["n"])


@pytest.mark.parametrize("counted_before", [False, True])
def test_the_counts_of_a_dropped_day_stay(pgq_queue: Queue, db: SQL, counted_before: bool) -> None:
    past_days(db, 2, 3)
    finished(db, 7, 3)
    finished(db, 4, 2, status="failed")
    if counted_before:
        assert _counted(db) == 11
    report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
    assert [n for _, n in report.dropped] == [7, 4]
    kept = db("SELECT coalesce(sum(jobs), 0) AS n FROM pgq.finished_counts_deleted")[0]["n"]
    # Minutes counted for good already are not kept again (the first pass reads them all otherwise).
    assert kept == (0 if counted_before else 11)
    assert _counted(db) == 11


def test_a_busy_day_is_tried_again_then_left_to_the_row_deletes(pgq_dsn: str, pgq_queue: Queue, db: SQL,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ops.admin, "PARTITION_LOCK_WAIT_S", 0.05)
    past_days(db, 3)
    finished(db, 3, 3)
    with psycopg.connect(pgq_dsn) as reader:  # a long reader of that day
        reader.execute(f"SELECT count(*) FROM pgq.{day_name(3)}")
        report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
        assert report.dropped == () and report.skipped == ((day_name(3), "busy"),)
        assert report.deleted == 3  # the row deletes do not wait for a reader
    assert day_name(3) in partitions(db)


def test_purge_racing_acknowledgements_loses_nothing(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    past_days(db, *range(2, 12))
    for back in range(2, 12):
        finished(db, 200, back)
    stop = threading.Event()
    acked: list[int] = []
    errors: list[BaseException] = []

    def acknowledge() -> None:
        # An acknowledgement's move (as pgq's functions finish a job): out of the live table, into the
        # history, in one statement. (pgq.claim itself is not used: on split43 it is being rewritten.)
        try:
            with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    with conn.transaction():
                        ids = [r[0] for r in conn.execute(
                            "INSERT INTO pgq.live_jobs (kind) SELECT 'ack' FROM generate_series(1, 20) RETURNING id")]
                        conn.execute(
                            "WITH gone AS (DELETE FROM pgq.live_jobs j WHERE j.id = ANY(%s) RETURNING j.*)"
                            " INSERT INTO pgq.finished_jobs (id, kind, queue, status, finished_at, created_at)"
                            " SELECT g.id, g.kind, g.queue, 'succeeded', now(), g.created_at FROM gone g", [ids])
                    acked.extend(ids)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=acknowledge) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        report = pgq_queue._run(_ops.purge_report(dt.timedelta(days=1)))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    # 2..11 days ago all end before the horizon; a busy one went row by row.
    assert len(report.dropped) + len(report.skipped) == 10 and report.jobs == 2000
    done = db("SELECT id FROM pgq.jobs WHERE kind = 'ack' AND status = 'succeeded'")
    assert len(acked) > 0 and sorted(r["id"] for r in done) == sorted(acked)
    assert db("SELECT count(*) AS n FROM pgq.finished_jobs WHERE kind = 'k'") == [{"n": 0}]


def test_the_maintenance_makes_the_partitions_ahead_and_drops_old_days(pgq_dsn: str, db: SQL) -> None:
    today = dt.datetime.now(dt.UTC).date()
    ahead = ["finished_jobs_" + (today + dt.timedelta(days=d)).strftime("%Y%m%d") for d in range(3, 8)]
    for name in ahead:
        db(f"DROP TABLE pgq.{name}")
    past_days(db, 3)
    finished(db, 4, 3)

    async def run() -> tuple[Any, Any]:
        async with AsyncQueue(pgq_dsn) as queue:
            made = await PartitionMaker(queue).run_once()
            kept = await Retention(queue, 86400.0).run_once()
            return made, kept

    made, kept = asyncio.run(run())
    assert made.counts == {"created": 5}  # today's was made by the migration
    assert set(ahead) <= set(partitions(db))
    assert kept.leader and kept.counts == {"dropped": 1, "dropped_jobs": 4, "skipped": 0, "deleted": 0}
    assert day_name(3) not in partitions(db)
