"""A job stored out of revision 0019's bounds (written before it, or by a superuser past the
triggers) never stalls a worker: its attempt fails with the reason and frees its slot, the rest of
its claim runs, and reads of it work or raise a pgq error."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import pgq
import pgq.otel
from pgq.bounds import UndecodableJob

from .conftest import DB, async_wait_for, run_worker_until

# A value nested past Python's default recursion limit is what these tests feed pgq.
pytestmark = pytest.mark.usefixtures("default_recursion_limit")

DEEP = "[" * 5000 + "]" * 5000
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@contextlib.contextmanager
def unchecked(db: DB) -> Iterator[None]:
    """Write pgq.jobs past the bounds, as rows written before revision 0019 are."""
    db.rows("ALTER TABLE pgq.live_jobs DISABLE TRIGGER jobs_json_bounded_insert")
    try:
        yield
    finally:
        db.rows("ALTER TABLE pgq.live_jobs ENABLE TRIGGER jobs_json_bounded_insert")


def poisoned(db: DB, kind: str, *, payload: str = "{}", context: str | None = None, n: int = 1) -> list[int]:
    with unchecked(db):
        return [db.value("INSERT INTO pgq.jobs (kind, payload, trace_context) VALUES (%s, %s::jsonb, %s::jsonb) "
                         "RETURNING id", [kind, payload, context]) for _ in range(n)]


def outcomes(db: DB) -> dict[int, tuple[str, str | None]]:
    return {r["id"]: (r["status"], r["last_error"])
            for r in db.rows("SELECT id, status::text, last_error FROM pgq.jobs ORDER BY id")}


def echo_app(pgq_dsn: str, *, traced: bool = False) -> tuple[pgq.App, list[int]]:
    """An app with one task, `echo`, that records each n it runs; traced: instrumented (pgq.otel)."""
    app = pgq.App(pgq_dsn)
    ran: list[int] = []

    @app.task
    def echo(n: int = 0) -> int:
        ran.append(n)
        return n

    if traced:
        pgq.otel.instrument(app, tracer_provider=TracerProvider())
    return app, ran


def test_a_nested_payload_fails_its_attempt_and_the_rest_of_the_claim_runs(pgq_dsn: str, db: DB) -> None:
    app, ran = echo_app(pgq_dsn)
    bad = poisoned(db, "echo", payload=DEEP, n=2)
    with pgq.Queue(pgq_dsn) as queue:
        good = [queue.enqueue("echo", {"n": n}) for n in range(4)]

    async def done(_: pgq.AsyncQueue) -> bool:
        return db.status_counts() == {"succeeded": 4, "failed": 2}

    asyncio.run(run_worker_until(app, done, concurrency=2, timeout=20))
    found = outcomes(db)
    assert all(found[i][0] == "succeeded" for i in good)
    for i in bad:
        status, error = found[i]
        assert status == "failed" and error is not None
        assert "cannot be decoded" in error and "nested too deeply" in error
    assert db.value("SELECT max(attempts) FROM pgq.jobs WHERE id = ANY(%s)", [bad]) == 1
    assert sorted(ran) == [0, 1, 2, 3]


def test_reads_of_a_nested_job_raise_a_pgq_error_or_show_it(pgq_dsn: str, db: DB) -> None:
    [bad] = poisoned(db, "echo", payload=DEEP)
    with pgq.Queue(pgq_dsn) as queue:
        with pytest.raises(UndecodableJob, match=f"job {bad} .*payload cannot be decoded"):
            queue.get(bad)
        assert issubclass(UndecodableJob, pgq.PgqError)
        [listed] = queue.list()
        assert listed.id == bad and not listed.payload
        assert "undecodable" in repr(listed.payload)
        cancelled = queue.cancel(bad)  # what the error says to do
        assert cancelled.status == pgq.JobStatus.CANCELLED


@pytest.mark.parametrize("context", [
    '{"traceparent": ' + DEEP + "}",
    json.dumps({"traceparent": TRACEPARENT, "baggage": "k=" + "v" * 40_000}),
    json.dumps({"traceparent": 7}),
], ids=["nested", "baggage", "not text"])
def test_a_bad_trace_context_never_keeps_a_slot(pgq_dsn: str, db: DB, context: str) -> None:
    app, ran = echo_app(pgq_dsn, traced=True)
    poisoned(db, "echo", payload='{"n": 1}', context=context, n=2)  # as many as the worker has slots
    with pgq.Queue(pgq_dsn) as queue:
        queue.enqueue("echo", {"n": 2})

    async def done(_: pgq.AsyncQueue) -> bool:
        return db.status_counts() == {"succeeded": 3}

    # run_worker_until also fails unless worker.stop() returns (within 20 s).
    asyncio.run(run_worker_until(app, done, concurrency=2, timeout=20))
    assert sorted(ran) == [1, 1, 2]


def test_a_span_that_cannot_start_fails_the_attempt_and_frees_the_slot(
        pgq_dsn: str, db: DB, monkeypatch: pytest.MonkeyPatch) -> None:
    app, ran = echo_app(pgq_dsn, traced=True)

    def broken(self: Any, job: pgq.Job, trace_context: str | None) -> Any:
        raise RuntimeError("the tracer is broken")

    monkeypatch.setattr(pgq.otel.Tracing, "process", broken)
    with pgq.Queue(pgq_dsn) as queue:
        ids = [queue.enqueue("echo", {"n": n}) for n in range(3)]
    failed = ("SELECT count(*) FROM pgq.jobs WHERE attempts = 1 AND status = 'queued' AND last_error LIKE "
              "'PrepareFailed: the attempt could not be prepared: RuntimeError: the tracer is broken%%'")

    async def done(_: pgq.AsyncQueue) -> bool:
        return bool(db.value(failed) == 3)  # each failed once, to be retried: one slot served them all

    asyncio.run(run_worker_until(app, done, concurrency=1, timeout=20))
    assert ran == [] and len(ids) == 3


def test_a_held_job_interrupted_before_it_starts_leaves_no_trace_context_behind(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    release = asyncio.Event()

    @app.task
    async def slow() -> None:
        await release.wait()

    @app.task
    def quick() -> None:
        pass

    pgq.otel.instrument(app, tracer_provider=TracerProvider())
    with pgq.Queue(pgq_dsn) as queue:
        pgq.otel.instrument(queue, tracer_provider=TracerProvider())  # the jobs carry a context
        queue.enqueue("slow")
        held = [queue.enqueue("quick") for _ in range(3)]
    worker = pgq.Worker(app, lease=5.0, poll_interval=0.1, concurrency=1, prefetch=4)

    async def main() -> dict[int, str]:
        run = asyncio.create_task(worker.run_async())
        try:
            async with pgq.AsyncQueue(pgq_dsn) as queue:
                async def all_held() -> bool:
                    state = worker._state
                    return state is not None and {c.id for c, _ in state.held} == set(held)

                await async_wait_for(all_held, 15, "the quick jobs to be held behind the slow one")
                assert set(worker._state.traces) >= set(held)  # read with the claim
                for job_id in held:
                    await queue.cancel(job_id)  # interrupted before they start

                async def dropped() -> bool:
                    return not worker._state.held

                await async_wait_for(dropped, 15, "the cancelled jobs to leave the prefetch buffer")
                return dict(worker._state.traces)
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(run, 20)

    left = asyncio.run(main())
    assert not set(left) & set(held)


def test_a_follow_up_or_result_past_the_bounds_fails_the_attempt_and_stores_nothing(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    too_deep: Any = 1
    for _ in range(65):
        too_deep = [too_deep]

    @app.task
    def spawn() -> None:
        pgq.after_success("child", {"v": too_deep})

    @app.task
    def answer() -> Any:
        return too_deep

    with pgq.Queue(pgq_dsn) as queue:
        queue.enqueue("spawn", max_attempts=1)
        queue.enqueue("answer", max_attempts=1)

    async def done(_: pgq.AsyncQueue) -> bool:
        return db.status_counts() == {"failed": 2}

    asyncio.run(run_worker_until(app, done, concurrency=2, timeout=20))
    errors = [r["last_error"] for r in db.rows("SELECT last_error FROM pgq.jobs ORDER BY id")]
    assert all("nests deeper than 64 levels" in e for e in errors), errors
    assert db.value("SELECT count(*) FROM pgq.jobs WHERE kind = 'child' OR result IS NOT NULL") == 0
