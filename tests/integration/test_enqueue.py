"""enqueue: single, batch, caller's transaction, dedupe, priority/FIFO, scheduling, validation."""

from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest

import pgq
from pgq import InvalidJob, JobSpec, JobStatus, Queue

from .conftest import SQL


def test_enqueue_returns_id_and_stores_every_field(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("send_email", {"to": "a@example.com"}, queue="mail", priority=-5,
                               max_attempts=3)
    job = pgq_queue.get(job_id)
    assert job is not None
    assert (job.kind, job.queue, job.payload, job.priority, job.max_attempts) == (
        "send_email", "mail", {"to": "a@example.com"}, -5, 3)
    assert job.status is JobStatus.QUEUED and job.attempts == 0
    [row] = db("SELECT run_at <= now() AS due, created_at <= now() AS created FROM pgq.jobs WHERE id = %s", [job_id])
    assert row == {"due": True, "created": True}


def test_enqueue_without_payload_stores_empty_object(pgq_queue: Queue) -> None:
    job = pgq_queue.get(pgq_queue.enqueue("noop"))
    assert job is not None and job.payload == {}


def test_enqueue_many_is_one_statement_and_keeps_input_order(pgq_queue: Queue, db: SQL) -> None:
    specs = [JobSpec("k", {"i": i}, queue=f"q{i % 3}") for i in range(10_000)]
    ids = pgq_queue.enqueue_many(specs)
    assert len(ids) == 10_000 and len(set(ids)) == 10_000
    rows = db("SELECT id, payload->>'i' AS i, queue FROM pgq.jobs")
    by_id = {r["id"]: r for r in rows}
    for i, job_id in enumerate(ids):
        assert by_id[job_id]["i"] == str(i) and by_id[job_id]["queue"] == f"q{i % 3}"


@pytest.mark.parametrize("shared", [True, False], ids=["shared-columns", "mixed-columns"])
def test_enqueue_many_stores_each_jobs_own_options(pgq_queue: Queue, db: SQL, shared: bool) -> None:
    """A batch without dedupe keys is one plain INSERT that sends a column shared by every job as one
    value and a column that no job sets as NULL: each row must still get exactly its own values."""
    at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    specs = [
        JobSpec("k" if shared else f"k{i % 3}", {"i": i}, queue="q" if shared else f"q{i % 2}",
                priority=0 if shared else i % 5 - 2,
                run_at=None if shared or i % 4 else at,
                delay=None if shared or i % 4 != 1 else 3600,
                watermark=None if shared or i % 4 != 2 else i,
                max_attempts=None if shared or i % 4 != 3 else 7)
        for i in range(40)
    ]
    ids = pgq_queue.enqueue_many(specs)
    rows = {r["id"]: r for r in db(
        "SELECT id, kind, payload, queue, priority, run_at, run_at > now() + interval '3599 s' AS delayed,"
        " input_watermark, max_attempts FROM pgq.jobs")}
    for spec, job_id in zip(specs, ids, strict=True):
        row = rows[job_id]
        assert (row["kind"], row["payload"], row["queue"], row["priority"]) == (
            spec.kind, spec.payload, spec.queue, spec.priority)
        if spec.run_at is not None:
            assert row["run_at"] == at
        assert row["delayed"] is (spec.delay is not None or spec.run_at is not None)
        assert row["input_watermark"] == spec.watermark
        assert row["max_attempts"] == (spec.max_attempts or 25)


def test_enqueue_many_accepts_mappings(pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "a", "payload": {"x": 1}}, {"kind": "b", "queue": "other"}])
    jobs = [pgq_queue.get(i) for i in ids]
    assert [(j.kind, j.queue) for j in jobs if j] == [("a", "default"), ("b", "other")]


def test_enqueue_many_empty_batch_writes_nothing(pgq_queue: Queue, db: SQL) -> None:
    assert pgq_queue.enqueue_many([]) == []
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_enqueue_in_callers_transaction_exists_iff_it_commits(pgq_queue: Queue, pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn) as conn:
        kept = pgq_queue.enqueue("k", conn=conn)
        assert pgq_queue.get(kept) is None  # not visible to others before the commit
        conn.commit()
        dropped = pgq_queue.enqueue("k", conn=conn)
        conn.rollback()
    assert pgq_queue.get(kept) is not None
    assert pgq_queue.get(dropped) is None


def test_dedupe_key_returns_active_job_and_creates_nothing(pgq_queue: Queue, db: SQL) -> None:
    first = pgq_queue.enqueue("sync", {"v": 1}, dedupe_key="user:1")
    again = pgq_queue.enqueue("sync", {"v": 2}, dedupe_key="user:1")
    other_queue = pgq_queue.enqueue("sync", dedupe_key="user:1", queue="other")
    assert again == first and other_queue != first
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 2}]
    [claim] = pgq_queue.claim(worker="w", queues=["default"])
    assert pgq_queue.enqueue("sync", dedupe_key="user:1") == first  # running is active too
    pgq_queue.complete(claim)
    fresh = pgq_queue.enqueue("sync", dedupe_key="user:1")  # finished: the key is free again
    assert fresh != first


def test_dedupe_within_one_batch_gives_one_job(pgq_queue: Queue, db: SQL) -> None:
    ids = pgq_queue.enqueue_many([JobSpec("k", dedupe_key="same"), JobSpec("k"), JobSpec("k", dedupe_key="same")])
    assert ids[0] == ids[2] != ids[1]
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 2}]


def test_32_threads_enqueueing_one_key_create_one_job(pgq_queue: Queue, db: SQL) -> None:
    barrier = threading.Barrier(32)
    ids: list[int] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            barrier.wait()
            ids.append(pgq_queue.enqueue("k", dedupe_key="contended"))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    with Queue(pgq_queue.pool) as shared:
        assert shared.pool is pgq_queue.pool
    pgq_queue.pool.resize(min_size=1, max_size=32)
    threads = [threading.Thread(target=enqueue) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(ids) == 32 and len(set(ids)) == 1
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 1}]


def test_priority_then_fifo(pgq_queue: Queue) -> None:
    low = pgq_queue.enqueue("k", priority=5)
    first = pgq_queue.enqueue("k")
    second = pgq_queue.enqueue("k")
    urgent = pgq_queue.enqueue("k", priority=-1)
    claimed = [c.job.id for c in pgq_queue.claim(worker="w", limit=10)]
    assert claimed == [urgent, first, second, low]


def test_delay_and_run_at_postpone(pgq_queue: Queue, db: SQL) -> None:
    delayed = pgq_queue.enqueue("k", delay=dt.timedelta(hours=1))
    later = pgq_queue.enqueue("k", run_at=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    due = pgq_queue.enqueue("k", delay=0)
    assert [c.job.id for c in pgq_queue.claim(worker="w", limit=10)] == [due]
    [row] = db("SELECT run_at - created_at BETWEEN interval '59 minutes' AND interval '61 minutes' AS ok "
               "FROM pgq.jobs WHERE id = %s", [delayed])
    assert row["ok"]
    db("UPDATE pgq.jobs SET run_at = now() - interval '1 second' WHERE id = %s", [later])
    assert [c.job.id for c in pgq_queue.claim(worker="w", limit=10)] == [later]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": ""}, "kind must not be empty"),
        ({"kind": "k", "payload": {"x": object()}}, "not JSON-serializable"),
        ({"kind": "k", "payload": {"x": float("nan")}}, "not JSON-serializable"),
        ({"kind": "k", "payload": {"x": "a\x00b"}}, "NUL"),
        ({"kind": "k\x00"}, "NUL"),
        ({"kind": "k", "priority": 40000}, "out of range"),
        ({"kind": "k", "priority": "1"}, "priority must be an int"),
        ({"kind": "k", "delay": -1}, "must not be negative"),
        ({"kind": "k", "delay": 1, "run_at": dt.datetime.now(dt.UTC)}, "not both"),
        ({"kind": "k", "run_at": dt.datetime(2030, 1, 1)}, "timezone-aware"),
        ({"kind": "k", "max_attempts": 0}, "max_attempts"),
        ({"kind": "k", "queue": ""}, "queue must not be empty"),
        ({"kind": "k", "payload": {"big": "x" * 1_000_001}}, "limit"),
    ],
)
def test_bad_input_is_rejected_before_anything_is_written(pgq_queue: Queue, db: SQL, kwargs: dict[str, object],
                                                          message: str) -> None:
    kind = kwargs.pop("kind")
    with pytest.raises(InvalidJob, match=message):
        pgq_queue.enqueue(kind, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob):
        pgq_queue.enqueue_many([JobSpec("ok"), {"kind": kind, **kwargs}])
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_errors_are_pgq_errors() -> None:
    for cls in (pgq.LeaseLost, pgq.NotFound, pgq.InvalidJob, pgq.InvalidState, pgq.NotMigrated):
        assert issubclass(cls, pgq.PgqError)


def test_text_with_quotes_percent_and_newlines_round_trips(pgq_queue: Queue) -> None:
    nasty = "a'b\"c %s %(x)s ; DROP TABLE pgq.jobs; --\n\t\\ é 😀 " + "z" * 10_000
    job_id = pgq_queue.enqueue(nasty, {nasty: nasty}, queue=nasty, dedupe_key=nasty)
    job = pgq_queue.get(job_id)
    assert job is not None
    assert (job.kind, job.queue, job.dedupe_key, job.payload) == (nasty, nasty, nasty, {nasty: nasty})
    assert pgq_queue.enqueue(nasty, queue=nasty, dedupe_key=nasty) == job_id
    [claim] = pgq_queue.claim(worker=nasty, queues=[nasty], kinds=[nasty])
    assert claim.job.id == job_id and claim.job.claimed_by == nasty
