"""`Queue.wait` / `AsyncQueue.wait`: woken by the database's notification when an awaited job
finishes, one LISTEN connection per client, TimeoutError on timeout, recovery after a lost LISTEN."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from pgq import AsyncQueue, InvalidJob, JobStatus, NotFound, Queue, _ops

WAITERS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
           "AND query LIKE 'LISTEN pgq_finished%%'")


def later(seconds: float, action: Any) -> threading.Thread:
    """Run `action()` in a thread after `seconds`."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    thread.start()
    return thread


def test_wait_returns_the_result_once_the_job_succeeds(pgq_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = pgq_queue.enqueue("k")
    reads: list[int] = []
    mark = _ops.wait_mark
    monkeypatch.setattr(_ops, "wait_mark", lambda i: (reads.append(i), mark(i))[1])

    def finish() -> None:
        [claim] = pgq_queue.claim(worker="w")
        pgq_queue.complete(claim, {"answer": 42})

    thread = later(1.5, finish)
    started = time.monotonic()
    job = pgq_queue.wait(job_id, timeout=10)
    took = time.monotonic() - started
    thread.join()
    assert job.status is JobStatus.SUCCEEDED and job.result == {"answer": 42}
    assert 1.4 < took < 5
    assert len(reads) <= 3  # woken by the notification, not by reading the job over and over


def test_wait_returns_failed_and_cancelled_jobs_with_their_error(pgq_queue: Queue) -> None:
    failing = pgq_queue.enqueue("k", max_attempts=1)
    doomed = pgq_queue.enqueue("k", queue="other")

    def fail() -> None:
        [claim] = pgq_queue.claim(worker="w", queues=["default"])
        pgq_queue.fail(claim, "boom")

    thread = later(0.5, fail)
    job = pgq_queue.wait(failing, timeout=10)
    thread.join()
    assert job.status is JobStatus.FAILED and job.last_error is not None and "boom" in job.last_error

    thread = later(0.5, lambda: pgq_queue.cancel(doomed))
    assert pgq_queue.wait(doomed, timeout=10).status is JobStatus.CANCELLED
    thread.join()
    # Finished already: returns at once.
    assert pgq_queue.wait(doomed, timeout=0).status is JobStatus.CANCELLED


def test_wait_times_out_and_refuses_bad_arguments(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        pgq_queue.wait(job_id, timeout=0.5)
    assert 0.4 < time.monotonic() - started < 3
    with pytest.raises(InvalidJob):
        pgq_queue.wait(job_id, timeout=-1)
    with pytest.raises(NotFound):
        pgq_queue.wait(999_999, timeout=1)
    assert pgq_queue.get(job_id).status is JobStatus.QUEUED  # type: ignore[union-attr]


def test_a_lost_listen_connection_does_not_lose_the_wake_up(pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    [claim] = pgq_queue.claim(worker="w")
    admin = psycopg.connect(pgq_dsn, autocommit=True)

    def break_listen_then_finish() -> None:
        deadline = time.monotonic() + 10
        while admin.execute(WAITERS).fetchone() != (1,) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The job finishes while nobody listens: the notification is lost; the reconnect must wake
        # the wait, which then reads the job.
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND query LIKE 'LISTEN pgq_finished%%'")
        pgq_queue.complete(claim, "done")

    thread = later(0.3, break_listen_then_finish)
    job = pgq_queue.wait(job_id, timeout=15)
    thread.join()
    admin.close()
    assert job.status is JobStatus.SUCCEEDED and job.result == "done"


def test_thousands_of_async_waits_share_one_listen_connection(pgq_dsn: str, pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k", "payload": {"n": n}} for n in range(2000)])

    async def main() -> list[Any]:
        async with AsyncQueue(pgq_dsn, max_size=4) as queue, await psycopg.AsyncConnection.connect(
                pgq_dsn, autocommit=True) as conn:
            waits = [asyncio.create_task(queue.wait(i, timeout=60)) for i in ids]
            # Every wait marks its job before the drain: no worker runs here, so no pgq.settle would tell
            # a wait whose mark raced with its job's completion (the finish did not see the mark).
            while (await (await conn.execute("SELECT count(*) FROM pgq.awaited_jobs")).fetchone()) != (2000,):
                await asyncio.sleep(0.05)

            def drain() -> None:
                with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                    assert conn.execute(WAITERS).fetchone() == (1,)
                while claims := pgq_queue.claim(worker="w", limit=200):
                    pgq_queue.complete_many([(c, c.job.payload["n"]) for c in claims])

            await asyncio.to_thread(drain)
            return await asyncio.gather(*waits)

    jobs = asyncio.run(main())
    assert [j.id for j in jobs] == ids
    assert all(j.status is JobStatus.SUCCEEDED for j in jobs)
    assert [j.result for j in jobs] == list(range(2000))
