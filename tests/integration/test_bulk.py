"""Bulk actions (issue 33): Queue.cancel_where / retry_where / delete_where select by every filter,
work in bounded batches, record each batch in pgq.job_audit, are safe to re-run, and retry each job
exactly once while workers claim and fail jobs concurrently."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

import pytest

from pgq import AsyncQueue, BulkResult, InvalidJob, JobStatus, Queue
from pgq.models import JSON

from .conftest import SQL


def failed(pgq_queue: Queue, n: int, *, kind: str = "k", queue: str = "q", payload: JSON = None,
           error: str = "boom") -> list[int]:
    """`n` jobs of `kind` in `queue` with `payload`, claimed and failed for good with `error`."""
    ids = [pgq_queue.enqueue(kind, payload, queue=queue, max_attempts=1) for _ in range(n)]
    for claim in pgq_queue.claim(worker="w", queues=[queue], limit=n):
        pgq_queue.fail(claim, error)
    return ids


def statuses(db: SQL, ids: list[int]) -> dict[int, str]:
    return {r["id"]: r["status"] for r in db("SELECT id, status::text FROM pgq.jobs WHERE id = ANY(%s)", [ids])}


def test_retry_where_matches_every_filter_in_batches_with_an_audit(pgq_queue: Queue, db: SQL) -> None:
    target = failed(pgq_queue, 7, kind="mail", payload={"tenant": 3, "x": 1}, error="SMTP timeout\nstack")
    other_tenant = failed(pgq_queue, 1, kind="mail", payload={"tenant": 4}, error="SMTP timeout")
    other_error = failed(pgq_queue, 1, kind="mail", payload={"tenant": 3}, error="bad address")
    other_kind = failed(pgq_queue, 1, kind="sms", payload={"tenant": 3}, error="smtp timeout")
    other_queue = failed(pgq_queue, 1, kind="mail", queue="q2", payload={"tenant": 3}, error="SMTP timeout")
    filters = {"queue": "q", "kind": "mail", "error": "smtp TIMEOUT", "payload": {"tenant": 3}}

    assert pgq_queue.retry_where(**filters, dry_run=True) == BulkResult("retry", 7, 0, 0, True)  # type: ignore[arg-type]
    assert set(statuses(db, target).values()) == {"failed"}
    seen: list[BulkResult] = []
    result = pgq_queue.retry_where(**filters, batch=3, actor="alice", progress=seen.append)  # type: ignore[arg-type]

    assert result == BulkResult("retry", 7, 7, 3, False)
    assert [(r.matched, r.changed) for r in seen] == [(3, 3), (6, 6), (7, 7)]
    assert set(statuses(db, target).values()) == {"queued"}
    assert set(statuses(db, other_tenant + other_error + other_kind + other_queue).values()) == {"failed"}
    audit = db("SELECT action, actor, db_role, filters, job_ids FROM pgq.job_audit ORDER BY id")
    assert [len(a["job_ids"]) for a in audit] == [3, 3, 1]
    assert sorted(i for a in audit for i in a["job_ids"]) == sorted(target)
    assert {(a["action"], a["actor"], a["db_role"]) for a in audit} == {("retry", "alice", "postgres")}
    assert audit[0]["filters"] == {**filters, "status": ["failed", "cancelled"]}
    # Safe to re-run: nothing is left to retry.
    assert pgq_queue.retry_where(**filters) == BulkResult("retry", 0, 0, 0, False)  # type: ignore[arg-type]


def test_created_and_finished_ranges(pgq_queue: Queue, db: SQL) -> None:
    old, new = failed(pgq_queue, 1), failed(pgq_queue, 1)
    db("UPDATE pgq.jobs SET created_at = now() - interval '2 days', finished_at = now() - interval '1 day' "
       "WHERE id = %s", [old[0]])
    [now] = db("SELECT now() - interval '1 hour' AS t")
    cut = now["t"]
    assert pgq_queue.retry_where(created_before=cut, dry_run=True).matched == 1
    assert pgq_queue.retry_where(finished_after=cut, dry_run=True).matched == 1
    assert pgq_queue.retry_where(finished_before=cut).changed == 1
    assert statuses(db, old + new) == {old[0]: "queued", new[0]: "failed"}
    assert pgq_queue.delete_where(created_after=cut, dry_run=True).matched == 1


def test_cancel_where_cancels_active_jobs_and_their_dependents(pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("k", {"batch": 1}, queue="q")
    child = pgq_queue.enqueue("k", {"batch": 2}, queue="q", depends_on=[parent])
    running = pgq_queue.enqueue("k", {"batch": 1}, queue="r")
    [claim] = pgq_queue.claim(worker="w", queues=["r"])
    kept = pgq_queue.enqueue("k", {"batch": 9}, queue="q")

    result = pgq_queue.cancel_where(payload={"batch": 1})

    assert (result.matched, result.changed) == (2, 2)
    assert statuses(db, [parent, child, running, kept]) == {
        parent: "cancelled", child: "cancelled", running: "cancelled", kept: "queued"}
    [row] = db("SELECT lease_token FROM pgq.jobs WHERE id = %s", [claim.id])
    assert row["lease_token"] is None
    with pytest.raises(InvalidJob, match="cancel applies to jobs in status waiting, queued, running; got failed"):
        pgq_queue.cancel_where(status="failed")


def test_delete_where_deletes_only_finished_jobs_and_keeps_their_ids_in_the_audit(pgq_queue: Queue, db: SQL) -> None:
    gone = failed(pgq_queue, 2, kind="old")
    active = pgq_queue.enqueue("old", queue="q")
    result = pgq_queue.delete_where(kind="old")
    assert (result.matched, result.changed) == (2, 2)
    assert statuses(db, [*gone, active]) == {active: "queued"}
    assert db("SELECT action, job_ids FROM pgq.job_audit") == [{"action": "delete", "job_ids": sorted(gone)}]


@pytest.mark.parametrize("bad", [{"status": "running"}, {"queue": ""}, {"payload": float("nan")},
                                 {"created_after": dt.datetime(2020, 1, 1)}, {"batch": 0}, {"status": []},
                                 {"error_line": "a\nb"}, {"error_line": "x" * 201}])
def test_bad_filters_are_refused_before_anything_is_written(pgq_queue: Queue, db: SQL, bad: dict[str, object]) -> None:
    failed(pgq_queue, 1)
    with pytest.raises(InvalidJob):
        pgq_queue.retry_where(**bad)  # type: ignore[arg-type]
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "failed"}]


def test_a_bulk_action_without_any_filter_is_refused_unless_a_dry_run(pgq_dsn: str, pgq_queue: Queue,
                                                                     db: SQL) -> None:
    failed(pgq_queue, 2)
    pgq_queue.enqueue("k")
    for where in (pgq_queue.retry_where, pgq_queue.cancel_where, pgq_queue.delete_where):
        with pytest.raises(InvalidJob, match=r"needs at least one filter.*say so with status="):
            where()
        with pytest.raises(InvalidJob, match="needs at least one filter"):
            where(queue=None, kind=None)  # filters passed along but all absent
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    assert db("SELECT status::text, count(*) AS n FROM pgq.jobs GROUP BY 1 ORDER BY 1") == [
        {"status": "failed", "n": 2}, {"status": "queued", "n": 1}]
    assert pgq_queue.retry_where(dry_run=True).matched == 2  # counting every job changes nothing

    async def async_twins() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=1) as q:
            for where in (q.retry_where, q.cancel_where, q.delete_where):
                with pytest.raises(InvalidJob, match="needs at least one filter"):
                    await where()

    asyncio.run(async_twins())
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    assert pgq_queue.cancel_where(status="queued").changed == 1  # every queued job, asked for by status


def test_retry_where_skips_dedupe_keys_held_and_waits_for_parents_retried_with_it(pgq_queue: Queue,
                                                                                  db: SQL) -> None:
    keyed = [pgq_queue.enqueue("k", queue="q", dedupe_key="same", max_attempts=1) for _ in range(1)]
    for claim in pgq_queue.claim(worker="w", queues=["q"]):
        pgq_queue.fail(claim, "x")
    keyed.append(pgq_queue.enqueue("k", queue="q", dedupe_key="same", max_attempts=1))
    for claim in pgq_queue.claim(worker="w", queues=["q"]):
        pgq_queue.fail(claim, "x")
    held = pgq_queue.enqueue("k", queue="q", dedupe_key="held", max_attempts=1)
    [claim] = pgq_queue.claim(worker="w", queues=["q"])
    pgq_queue.fail(claim, "x")
    pgq_queue.enqueue("k", queue="q", dedupe_key="held")  # the active holder of key "held"
    parent = pgq_queue.enqueue("p", queue="dag", max_attempts=1)
    child = pgq_queue.enqueue("c", queue="dag", depends_on=[parent])
    [claim] = pgq_queue.claim(worker="w", queues=["dag"])
    pgq_queue.fail(claim, "x")  # cancels the child

    result = pgq_queue.retry_where(status=["failed", "cancelled"])  # every job it applies to, said so

    assert (result.matched, result.changed) == (5, 3)
    assert statuses(db, [*keyed, held, parent, child]) == {
        keyed[0]: "failed", keyed[1]: "queued", held: "failed", parent: "queued", child: "waiting"}
    [row] = db("SELECT pending_parents FROM pgq.jobs WHERE id = %s", [child])
    assert row["pending_parents"] == 1


@pytest.mark.slow
def test_retry_where_retries_each_job_exactly_once_while_workers_fail_them(pgq_queue: Queue, db: SQL) -> None:
    n = 3000
    db("INSERT INTO pgq.jobs (queue, kind, status, attempts, max_attempts, last_error, finished_at) "
       "SELECT 'bulk', 'k', 'failed', 1, 1, 'boom', now() FROM generate_series(1, %s)", [n])
    stop = threading.Event()
    refailed = [0]

    def worker() -> None:
        with Queue(pgq_queue.pool) as q:
            while not stop.is_set():
                claims = q.claim(worker="racer", queues=["bulk"], limit=50)
                for c in claims:
                    q.fail(c, "boom again")
                refailed[0] += len(claims)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        result = pgq_queue.retry_where(queue="bulk", batch=500)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert (result.matched, result.changed) == (n, n)
    counts = db("SELECT count(DISTINCT i) AS jobs, count(*) AS retries "
                "FROM pgq.job_audit, unnest(job_ids) AS i WHERE action = 'retry'")
    assert counts == [{"jobs": n, "retries": n}]
    assert refailed[0] > 0  # the workers did race the retry
    assert JobStatus.RUNNING.value not in {r["status"] for r in db("SELECT DISTINCT status::text FROM pgq.jobs")}
