"""The worker against a real PostgreSQL, run in-process (asyncio.run in each test): handlers, outcomes,
retries, timeouts, snoozes, wake-ups, leases, concurrency and shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest

import pgq
from pgq import AsyncQueue, JobStatus
from pgq.tasks import Task

from .conftest import DB, async_wait_for, run_worker_until

FAST_RETRY = pgq.Backoff(initial=0.05, factor=2, jitter=0, min_delay=0.05, max_delay=0.2)


async def all_finished(queue: AsyncQueue) -> bool:
    return not any(j.status in (JobStatus.QUEUED, JobStatus.RUNNING) for j in await queue.list(limit=1000))


def test_sync_and_async_handlers_store_their_results(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    threads: set[str] = set()

    @app.task
    def add(a: int, b: int) -> int:
        threads.add(threading.current_thread().name)
        return a + b

    @app.task
    async def greet(name: str) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"hello": name}

    @app.task
    def nothing() -> None:
        pass

    async def main() -> pgq.Worker:
        async def before(queue: AsyncQueue) -> None:
            await add.defer_async(a=2, b=3)
            await greet.defer_async(name="pgq")
            nothing.defer()  # the sync API, from inside a loop, on its own pool

        return await run_worker_until(app, all_finished, before=before)

    worker = asyncio.run(main())
    app.close()
    rows = db.rows("SELECT kind, status::text, result FROM pgq.jobs")
    results = {r["kind"]: (r["status"], r["result"]) for r in rows}
    assert results == {"add": ("succeeded", 5), "greet": ("succeeded", {"hello": "pgq"}),
                       "nothing": ("succeeded", None)}
    assert worker.stats["succeeded"] == 3
    assert threads and all(t.startswith("pgq-") for t in threads)  # sync handlers run in the worker's threads


def test_failing_handler_is_retried_with_backoff_then_succeeds(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    starts: list[float] = []

    @app.task(retry=pgq.Backoff(initial=0.3, factor=1, jitter=0, min_delay=0), max_attempts=5)
    async def flaky() -> int:
        starts.append(time.monotonic())
        attempt = pgq.current_job().attempts
        if attempt < 3:
            raise ConnectionError(f"upstream down (attempt {attempt})")
        return attempt

    async def main() -> None:
        await run_worker_until(app, all_finished, before=lambda q: flaky.defer_async())

    asyncio.run(main())
    job = db.rows("SELECT status::text, attempts, result, last_error FROM pgq.jobs")[0]
    assert (job["status"], job["attempts"], job["result"]) == ("succeeded", 3, 3)
    assert "ConnectionError: upstream down (attempt 2)" in job["last_error"]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 2 and all(gap >= 0.28 for gap in gaps), gaps  # the policy's 0.3 s, on the DB clock
    assert all(gap < 1.5 for gap in gaps), gaps  # woken by the retry timer, not left to slow polling


def test_handler_out_of_attempts_fails_with_traceback(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(retry=FAST_RETRY, max_attempts=2)
    def broken() -> None:
        raise RuntimeError("always")

    asyncio.run(run_worker_until(app, all_finished, before=lambda q: broken.defer_async()))
    job = db.rows("SELECT status::text, attempts, last_error FROM pgq.jobs")[0]
    assert (job["status"], job["attempts"]) == ("failed", 2)
    assert job["last_error"].startswith("RuntimeError: always")
    assert "Traceback" in job["last_error"] and "in broken" in job["last_error"]


def test_permanent_failure_and_policy_none_fail_without_retry(pgq_dsn: str, db: DB) -> None:
    class NoRetry:
        def retry_in(self, attempt: int, error: BaseException) -> float | None:
            return None

    app = pgq.App(pgq_dsn)

    @app.task
    def refuse() -> None:
        raise pgq.PermanentFailure("bad input, never retry")

    @app.task(retry=NoRetry())
    def once() -> None:
        raise ValueError("no second chance")

    async def before(queue: AsyncQueue) -> None:
        await refuse.defer_async()
        await once.defer_async()

    asyncio.run(run_worker_until(app, all_finished, before=before))
    rows = {r["kind"]: r for r in db.rows("SELECT kind, status::text, attempts, last_error FROM pgq.jobs")}
    assert {k: (r["status"], r["attempts"]) for k, r in rows.items()} == {"refuse": ("failed", 1),
                                                                        "once": ("failed", 1)}
    assert "bad input, never retry" in rows["refuse"]["last_error"]


def test_timeout_cancels_async_and_abandons_sync_handlers(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    cancelled = threading.Event()
    release_thread = threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    async def slow_async() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @app.task(timeout=dt.timedelta(milliseconds=200), max_attempts=1)
    def slow_sync() -> None:
        release_thread.wait(30)

    async def before(queue: AsyncQueue) -> None:
        await slow_async.defer_async()
        await slow_sync.defer_async()

    try:
        worker = asyncio.run(run_worker_until(app, all_finished, before=before, timeout=10))
    finally:
        release_thread.set()
    rows = db.rows("SELECT kind, status::text, attempts, last_error FROM pgq.jobs ORDER BY kind")
    assert [(r["kind"], r["status"], r["attempts"]) for r in rows] == [("slow_async", "failed", 1),
                                                                     ("slow_sync", "failed", 1)]
    assert all("timeout" in r["last_error"] for r in rows)
    assert cancelled.is_set()
    assert worker.stats["failed"] == 2


def test_snooze_returned_or_raised_requeues_without_spending_an_attempt(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    runs: dict[str, int] = {"ret": 0, "raise": 0}

    @app.task(max_attempts=1)
    def ret() -> Any:
        runs["ret"] += 1
        return pgq.Snooze(0.1) if runs["ret"] < 3 else "ok"

    @app.task(max_attempts=1)
    async def rais() -> str:
        runs["raise"] += 1
        if runs["raise"] < 2:
            raise pgq.Snooze(dt.timedelta(milliseconds=100))
        return "ok"

    async def before(queue: AsyncQueue) -> None:
        await ret.defer_async()
        await rais.defer_async()

    worker = asyncio.run(run_worker_until(app, all_finished, before=before))
    rows = db.rows("SELECT kind, status::text, attempts, result FROM pgq.jobs ORDER BY kind")
    # max_attempts=1 and several runs each: the snoozes spent no attempt.
    assert [(r["kind"], r["status"], r["attempts"], r["result"]) for r in rows] == [
        ("rais", "succeeded", 1, "ok"), ("ret", "succeeded", 1, "ok")]
    assert runs == {"ret": 3, "raise": 2}
    assert worker.stats["snoozed"] == 3


def test_poll_later_snoozes_until_the_deadline_then_fails_as_timed_out(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    polls: list[float] = []  # when each poll started, on the database clock: seconds after the job's creation

    @app.task(max_attempts=3)
    def wait_for_export() -> Any:
        job = pgq.current_job()
        assert job.started_at is not None
        polls.append((job.started_at - job.created_at).total_seconds())
        return pgq.poll_later(deadline=0.8, fast=0.1, fast_for=0.3, slow=0.25)

    # Due 0.2 s after its creation: the deadline counts from the creation, not from the first poll.
    asyncio.run(run_worker_until(app, all_finished, poll_interval=0.05,
                                 before=lambda q: wait_for_export.configure(delay=0.2).defer_async()))
    job = db.rows("SELECT status::text, attempts, last_error, "
                  "extract(epoch FROM finished_at - created_at)::float8 AS failed_after FROM pgq.jobs")[0]
    assert (job["status"], job["attempts"]) == ("failed", 1)  # final at once: no retries of a timeout
    assert job["last_error"].startswith("PollingTimeout: timed out")
    # Fast polls first, then slow ones, the last one at the deadline: ~.2, ~.3, ~.55, ~.8 s after the
    # creation. Each snooze waits at least its interval (or up to the deadline), so never more polls; on
    # a loaded machine a late claim may skip some. Every poll but the last came before the deadline, and
    # the job failed at or past it, all on the database clock.
    assert len(polls) <= 4 and polls[0] >= 0.2, polls
    assert all(p < 0.8 for p in polls[:-1]), polls
    assert job["failed_after"] >= 0.8, (job, polls)


def test_bad_payloads_fail_at_once_naming_the_problem(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    def send(to: str) -> None:
        pass

    @app.task
    def unstorable() -> object:
        return {1, 2}

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue("send", [1, 2])
        await queue.enqueue("send", {"to": "a", "cc": "b"})
        await queue.enqueue("send", {})
        await queue.enqueue("unstorable", {})

    asyncio.run(run_worker_until(app, all_finished, before=before))
    rows = db.rows("SELECT status::text, attempts, last_error FROM pgq.jobs ORDER BY id")
    assert all((r["status"], r["attempts"]) == ("failed", 1) for r in rows), rows
    errors = [r["last_error"] for r in rows]
    assert "task 'send'" in errors[0] and "JSON object" in errors[0]
    assert "unexpected keyword argument 'cc'" in errors[1]
    assert "missing a required argument: 'to'" in errors[2]
    assert "task 'unstorable' returned a value that cannot be stored" in errors[3]


def test_notify_wakes_an_idle_worker_at_once(pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)
    started: list[float] = []

    @app.task
    def ping() -> None:
        started.append(time.monotonic())

    async def main() -> list[float]:
        worker = pgq.Worker(app, poll_interval=30, lease=5)  # polling alone would take 24-36 s
        runner = asyncio.create_task(worker.run_async())
        latencies = []
        try:
            async with AsyncQueue(pgq_dsn) as queue:
                await asyncio.sleep(0.3)  # let it connect and go idle
                for _ in range(5):
                    count = len(started)
                    sent = time.monotonic()
                    await queue.enqueue("ping")

                    async def seen(count: int = count) -> bool:
                        return len(started) > count

                    await async_wait_for(seen, 5, "the handler to start")
                    latencies.append(started[-1] - sent)
        finally:
            worker.stop()
            await runner
        return latencies

    latencies = asyncio.run(main())
    assert max(latencies) < 0.5, latencies


def test_worker_without_listen_polls(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    def ping() -> str:
        return "pong"

    asyncio.run(run_worker_until(app, all_finished, before=lambda q: q.enqueue("ping"), listen=False,
                                 poll_interval=0.1))
    assert db.value("SELECT status::text FROM pgq.jobs") == "succeeded"


def test_scheduled_job_starts_on_time_without_fast_polling(pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)
    started: list[float] = []

    @app.task
    def later() -> None:
        started.append(time.monotonic())

    async def main() -> float:
        worker = pgq.Worker(app, poll_interval=30, lease=5)
        runner = asyncio.create_task(worker.run_async())
        try:
            async with AsyncQueue(pgq_dsn) as queue:
                await asyncio.sleep(0.3)
                sent = time.monotonic()
                await queue.enqueue("later", delay=0.7)

                async def seen() -> bool:
                    return bool(started)

                await async_wait_for(seen, 5, "the scheduled job to start")
                return started[0] - sent
        finally:
            worker.stop()
            await runner

    waited = asyncio.run(main())
    assert 0.65 <= waited < 1.5, waited


def test_concurrency_is_filled_and_never_exceeded(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    running = 0
    peak = 0

    @app.task
    async def work() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue_many([{"kind": "work"} for _ in range(60)])

    worker = asyncio.run(run_worker_until(app, all_finished, before=before, concurrency=6))
    assert peak == 6
    assert worker.stats["succeeded"] == 60
    assert db.status_counts() == {"succeeded": 60}


def test_blocking_sync_handlers_run_in_parallel_threads(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    gate = threading.Barrier(4, timeout=10)  # passes only when four handlers block at the same time

    @app.task
    def blocking(n: int) -> int:
        gate.wait()
        return n

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue_many([{"kind": "blocking", "payload": {"n": n}} for n in range(8)])

    asyncio.run(run_worker_until(app, all_finished, before=before, concurrency=4, timeout=20))
    assert db.status_counts() == {"succeeded": 8}


def test_concurrency_limit_of_a_task_holds_across_the_worker(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    running = 0
    peak = 0

    @app.task(concurrency_limit=2)
    async def limited() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1

    async def before(queue: AsyncQueue) -> None:
        await asyncio.sleep(0.2)  # the worker sets the limit before its first claim
        await queue.enqueue_many([{"kind": "limited"} for _ in range(12)])

    asyncio.run(run_worker_until(app, all_finished, before=before, concurrency=8))
    assert peak == 2
    assert db.value("SELECT max_running FROM pgq.concurrency_limits WHERE kind = 'limited'") == 2


def test_heartbeat_keeps_a_long_sync_job_alive_past_its_lease(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    def long_job() -> str:
        time.sleep(2.0)  # blocks its thread only: heartbeats go on
        return "done"

    worker = asyncio.run(run_worker_until(app, all_finished, before=lambda q: long_job.defer_async(),
                                          lease=0.6, rescue_interval=0.2))
    job = db.rows("SELECT status::text, attempts, last_error FROM pgq.jobs")[0]
    assert (job["status"], job["attempts"], job["last_error"]) == ("succeeded", 1, None)
    assert worker.stats["lost"] == 0


def _cancel_while_running(pgq_dsn: str, outcome: list[str], *, return_on_cancel: bool = False,
                          **settings: Any) -> pgq.Worker:
    """Run a worker (`settings`) on an async job that sleeps `settings.pop("sleep")` seconds, cancel
    it once it started, then run one more job; return the worker. `outcome` gets "cancelled" if the
    handler saw CancelledError. `return_on_cancel`: the handler returns as soon as the cancel has
    committed (within `sleep`), so that the worker has had next to no time to hear of it."""
    app = pgq.App(pgq_dsn)
    started = threading.Event()
    cancel_done = threading.Event()
    sleep = settings.pop("sleep")

    @app.task
    async def victim() -> str:
        started.set()
        try:
            deadline = time.monotonic() + sleep
            while time.monotonic() < deadline and not (return_on_cancel and cancel_done.is_set()):
                await asyncio.sleep(0.001 if return_on_cancel else deadline - time.monotonic())
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "too late"

    @app.task
    def after() -> str:
        return "fine"

    async def before(queue: AsyncQueue) -> None:
        job_id = await victim.defer_async()
        await asyncio.to_thread(started.wait, 5)
        await queue.cancel(job_id)
        cancel_done.set()
        await after.defer_async()

    worker = asyncio.run(run_worker_until(app, all_finished, before=before, **settings))
    app.close()
    return worker


def test_a_refused_completion_is_a_lost_lease_logged_not_a_crash(pgq_dsn: str, db: DB,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    # Without LISTEN, and with the handler returning a moment after the cancel committed (its lease
    # check comes every poll interval, whenever the job started), the worker has not heard of the
    # cancel when the handler returns: its completion is refused, and counted as a lost lease.
    caplog.set_level(logging.WARNING, logger="pgq.worker")
    outcome: list[str] = []
    worker = _cancel_while_running(pgq_dsn, outcome, return_on_cancel=True, sleep=5, listen=False,
                                   poll_interval=3)
    assert outcome == []
    assert db.status_counts() == {"cancelled": 1, "succeeded": 1}
    assert (worker.stats["lost"], worker.stats["cancelled"]) == (1, 0)
    assert any("complete refused: lease lost" in r.getMessage() for r in caplog.records)


def test_a_cancelled_job_is_interrupted_counted_and_logged(pgq_dsn: str, db: DB,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgq.worker")
    outcome: list[str] = []
    worker = _cancel_while_running(pgq_dsn, outcome, sleep=30, timeout=10)
    assert outcome == ["cancelled"]
    assert db.status_counts() == {"cancelled": 1, "succeeded": 1}
    assert (worker.stats["lost"], worker.stats["cancelled"]) == (0, 1)
    assert any(": cancelled; its handler is being stopped" in r.getMessage() for r in caplog.records)


def _sleeper(app: pgq.App, seconds: float) -> tuple[Task[[], Coroutine[Any, Any, str]], threading.Event, list[str]]:
    """An async task of `app` that sleeps `seconds`; the event is set once it started, and the list
    gets "interrupted" (CancelledError) or "ran" when it ends."""
    started = threading.Event()
    outcome: list[str] = []

    @app.task
    async def victim() -> str:
        started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            outcome.append("interrupted")
            raise
        outcome.append("ran")
        return "ran"

    return victim, started, outcome


@pytest.mark.parametrize("form", ["md5", "token", "neither"])
def test_a_cancel_notice_names_the_attempt_by_its_token_digest_or_the_token(pgq_dsn: str, form: str) -> None:
    """Revision 0032's notice names the md5 of the lease token (a claim's jobs share one); a schema
    older than the worker names the token itself (a rolling upgrade): either interrupts the handler,
    and a notice naming neither leaves it running to its end."""
    app = pgq.App(pgq_dsn)
    victim, started, outcome = _sleeper(app, 1.5)

    async def before(queue: AsyncQueue) -> None:
        job_id = await victim.defer_async()
        await asyncio.to_thread(started.wait, 5)
        async with await psycopg.AsyncConnection.connect(pgq_dsn, autocommit=True) as conn:
            row = await (await conn.execute(b"SELECT lease_token::text, md5(lease_token::text) FROM pgq.jobs "
                                            b"WHERE id = %s", (job_id,))).fetchone()
            assert row is not None
            mark = {"md5": row[1], "token": row[0], "neither": "0" * 32}[form]
            # The job is cancelled without pgq's notice (an UPDATE of pgq.jobs with the table's triggers
            # off, as a replica applies it: since revision 0034 the UPDATE would notify); this test sends
            # the notice itself.
            async with conn.transaction():
                await conn.execute(b"SET LOCAL session_replication_role = replica")
                await conn.execute(b"UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(), "
                                   b"lease_token = NULL, lease_expires_at = NULL WHERE id = %s", (job_id,))
            await conn.execute(b"SELECT pg_notify('pgq_cancel', %s)", (f"{job_id}:{mark}",))

    # A lease long enough that no renewal falls within the handler's 1.5 s: a renewal would find the
    # job cancelled and interrupt it whatever the notice said.
    worker = asyncio.run(run_worker_until(app, all_finished, before=before, timeout=10, lease=60))
    app.close()
    if form == "neither":
        assert outcome == ["ran"]
        assert (worker.stats["lost"], worker.stats["cancelled"]) == (1, 0)  # its completion refused
    else:
        assert outcome == ["interrupted"]
        assert (worker.stats["lost"], worker.stats["cancelled"]) == (0, 1)


@pytest.mark.parametrize("lease", ["kept", "cleared"])
def test_a_dbas_update_that_cancels_a_running_job_interrupts_its_handler(pgq_dsn: str, db: DB, lease: str) -> None:
    """Revision 0034: the UPDATE a DBA types in psql cancels a running job as pgq.cancel does. The row
    moves to the history (a delete and an insert), and the worker hears of it at once, whether the
    UPDATE clears the lease (as it had to before revision 0033) or leaves it. From 0033 to 0034 nobody
    told the worker: the handler ran on to its end, its result then refused."""
    app = pgq.App(pgq_dsn)
    victim, started, outcome = _sleeper(app, 8)
    clear = b", lease_token = NULL, lease_expires_at = NULL" if lease == "cleared" else b""

    async def before(queue: AsyncQueue) -> None:
        job_id = await victim.defer_async()
        await asyncio.to_thread(started.wait, 5)
        async with await psycopg.AsyncConnection.connect(pgq_dsn, autocommit=True) as conn:
            await conn.execute(b"UPDATE pgq.jobs SET status = 'cancelled', finished_at = now()" + clear
                               + b" WHERE id = %s", (job_id,))

    async def handler_ended(queue: AsyncQueue) -> bool:
        return bool(outcome)

    # A lease long enough that no renewal falls within the handler's 8 s (a renewal would find the job
    # gone and stop it too), and less time to end than the handler takes: only the notice stops it.
    worker = asyncio.run(run_worker_until(app, handler_ended, before=before, timeout=6, lease=60))
    app.close()
    assert outcome == ["interrupted"]
    assert (worker.stats["lost"], worker.stats["cancelled"]) == (0, 1)
    assert db.rows("SELECT status::text FROM pgq.jobs") == [{"status": "cancelled"}]


def test_stop_drains_running_jobs_to_completion(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    started = threading.Event()

    @app.task
    def slowish() -> str:
        started.set()
        time.sleep(0.4)
        return "finished"

    async def main() -> None:
        worker = pgq.Worker(app, drain_timeout=5, lease=5)
        runner = asyncio.create_task(worker.run_async())
        await slowish.defer_async()
        await asyncio.to_thread(started.wait, 5)
        stop_at = time.monotonic()
        worker.stop()
        await asyncio.wait_for(runner, 10)
        assert time.monotonic() - stop_at < 2
        await app.aclose()

    asyncio.run(main())
    assert db.rows("SELECT status::text, result FROM pgq.jobs") == [{"status": "succeeded", "result": "finished"}]


def test_drain_timeout_releases_unfinished_jobs_at_once(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    started = threading.Event()
    gate = threading.Event()

    @app.task
    def stuck() -> None:
        started.set()
        gate.wait(30)

    @app.task
    async def stuck_async() -> None:
        await asyncio.sleep(30)

    async def main() -> pgq.Worker:
        worker = pgq.Worker(app, drain_timeout=0.3, lease=60)
        runner = asyncio.create_task(worker.run_async())
        await stuck.defer_async()
        await stuck_async.defer_async()
        await asyncio.to_thread(started.wait, 5)
        await async_wait_for(lambda: asyncio.sleep(0, worker.stats["claimed"] == 2), 5, "both claimed")
        stop_at = time.monotonic()
        worker.stop()
        await asyncio.wait_for(runner, 10)
        assert time.monotonic() - stop_at < 2  # not the 60 s lease
        return worker

    try:
        worker = asyncio.run(main())
    finally:
        gate.set()
    rows = db.rows("SELECT status::text, attempts, lease_token FROM pgq.jobs")
    assert rows == [{"status": "queued", "attempts": 0, "lease_token": None}] * 2  # no attempt spent
    assert worker.stats["released"] == 2


def test_abort_releases_at_once_even_with_a_long_drain_timeout(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    async def forever() -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        worker = pgq.Worker(app, drain_timeout=60, lease=60)
        runner = asyncio.create_task(worker.run_async())
        await forever.defer_async()
        await async_wait_for(lambda: asyncio.sleep(0, worker.stats["claimed"] == 1), 5, "the claim")
        worker.stop()
        await asyncio.sleep(0.1)
        worker.abort()
        await asyncio.wait_for(runner, 5)
        await app.aclose()

    asyncio.run(main())
    assert db.rows("SELECT status::text, attempts FROM pgq.jobs") == [{"status": "queued", "attempts": 0}]


def test_released_sync_handler_returning_later_changes_nothing(pgq_dsn: str, db: DB,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    # A sync handler's thread cannot be stopped: released at shutdown, it may return while the loop
    # still runs. Its outcome must then be dropped: the job went back to the queue, no attempt spent.
    app = pgq.App(pgq_dsn)
    started = threading.Event()
    gate = threading.Event()
    returned = threading.Event()

    @app.task
    def stuck() -> str:
        started.set()
        gate.wait(30)
        returned.set()
        return "too late"

    async def main() -> pgq.Worker:
        worker = pgq.Worker(app, drain_timeout=0.2, lease=60)
        runner = asyncio.create_task(worker.run_async())
        await stuck.defer_async()
        await asyncio.to_thread(started.wait, 5)
        worker.stop()
        await asyncio.wait_for(runner, 10)
        gate.set()  # the loop runs on: the late outcome reaches it
        await asyncio.to_thread(returned.wait, 5)
        await asyncio.sleep(0.2)
        await app.aclose()
        return worker

    try:
        with caplog.at_level(logging.DEBUG, logger="pgq.worker"):
            worker = asyncio.run(main())
    finally:
        gate.set()
    assert db.rows("SELECT status::text, attempts, result FROM pgq.jobs") == [
        {"status": "queued", "attempts": 0, "result": None}]
    assert (worker.stats["released"], worker.stats["succeeded"]) == (1, 0)
    outcomes = [getattr(r, "outcome", None) for r in caplog.records if getattr(r, "event", "") == "job_finish"]
    assert outcomes == ["released"]  # reported once, at shutdown; the late return is not an outcome


def test_sync_handler_raising_cancelled_or_system_exit_is_just_a_failure(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(max_attempts=1)
    def cancels() -> None:
        raise asyncio.CancelledError

    @app.task(max_attempts=1)
    def exits() -> None:
        raise SystemExit(3)

    @app.task(max_attempts=1)
    async def cancels_async() -> None:
        raise asyncio.CancelledError

    async def before(queue: AsyncQueue) -> None:
        await cancels.defer_async()
        await exits.defer_async()
        await cancels_async.defer_async()

    worker = asyncio.run(run_worker_until(app, all_finished, before=before))
    rows = db.rows("SELECT kind, status::text, attempts, last_error FROM pgq.jobs ORDER BY kind")
    assert [(r["kind"], r["status"], r["attempts"]) for r in rows] == [
        ("cancels", "failed", 1), ("cancels_async", "failed", 1), ("exits", "failed", 1)]
    assert rows[0]["last_error"].startswith("RuntimeError: the handler raised CancelledError")
    assert rows[1]["last_error"].startswith("RuntimeError: the handler raised CancelledError")
    assert rows[2]["last_error"].startswith("SystemExit: 3")
    assert worker.stats["failed"] == 3


def test_worker_on_unmigrated_database_raises_not_migrated(pgq_empty_dsn: str) -> None:
    app = pgq.App(pgq_empty_dsn)
    with pytest.raises(pgq.NotMigrated):
        asyncio.run(asyncio.wait_for(pgq.Worker(app, maintenance=False).run_async(), 15))


def test_worker_runs_only_once(pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)

    async def main() -> None:
        worker = pgq.Worker(app)
        worker.stop()  # before it runs: it starts, drains nothing, and returns
        await asyncio.wait_for(worker.run_async(), 10)
        with pytest.raises(pgq.PgqError, match="only once"):
            await worker.run_async()

    asyncio.run(main())


def test_handler_defer_async_uses_the_worker_queue(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    async def parent(n: int) -> None:
        if n > 0:
            await parent.configure(dedupe_key=f"child-{n}").defer_async(n=n - 1)

    asyncio.run(run_worker_until(app, all_finished, before=lambda q: parent.defer_async(n=3)))
    assert db.status_counts() == {"succeeded": 4}


def test_adaptive_prefetch_grows_for_fast_jobs(pgq_dsn: str, db: DB) -> None:
    """By default a worker holds about 0.25 s of work: with a deep queue of instant jobs that is far
    more than its concurrency, so claims get big (few round trips per job)."""
    app = pgq.App(pgq_dsn)

    @app.task
    async def instant(i: int) -> None:
        pass

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue_many([pgq.JobSpec("instant", {"i": i}) for i in range(3000)])

    asyncio.run(run_worker_until(app, all_finished, before=before, concurrency=4))
    assert db.status_counts() == {"succeeded": 3000}
    # The jobs of one claim share its transaction's started_at: some claim took more than the 4 free
    # slots plus a buffer of 4, the floor of the prefetch.
    biggest = db.value("SELECT max(n) FROM (SELECT count(*) AS n FROM pgq.jobs GROUP BY started_at) c")
    assert biggest > 2 * 4, biggest


def test_adaptive_prefetch_stays_small_for_slow_jobs(pgq_dsn: str, db: DB) -> None:
    """Slow jobs start a few times a second: 0.25 s of them is less than the concurrency, so a worker
    holds at most twice its concurrency and leaves the rest of a shallow queue to other workers."""
    app = pgq.App(pgq_dsn)

    @app.task
    async def slow(i: int) -> None:
        await asyncio.sleep(0.2)

    leased: list[int] = []

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue_many([pgq.JobSpec("slow", {"i": i}) for i in range(12)])

    async def done(queue: AsyncQueue) -> bool:
        leased.append(db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'running'"))
        return await all_finished(queue)

    asyncio.run(run_worker_until(app, done, before=before, concurrency=2))
    assert db.status_counts() == {"succeeded": 12}
    # Each claim asks for the free slots plus the room in the buffer: 2 running + 2 held at most. (The
    # jobs of one claim share its transaction's started_at.)
    biggest = db.value("SELECT max(n) FROM (SELECT count(*) AS n FROM pgq.jobs GROUP BY started_at) c")
    assert biggest <= 4, biggest
    # Leased at any moment: those 4, plus for a few milliseconds the jobs that just finished, whose
    # acknowledgement (batched, ack_delay) is still on its way while their slots are refilled. Never
    # the whole queue.
    assert max(leased) <= 6, leased


def test_adaptive_prefetch_holds_few_jobs_with_big_payloads(
    pgq_dsn: str, db: DB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.25 s of fast jobs is hundreds of jobs, and as many payloads in the worker's memory (with
    1 MB payloads a worker peaked at 1 GB): the buffer holds at most PREFETCH_MAX_BYTES of payload at
    the size its claims brought. Lowered here to 256 kB, with payloads of 32 kB: 8 jobs, so a claim
    takes at most the 4 slots and those 8 (without the cap, claims grow past 100 here)."""
    monkeypatch.setattr("pgq.worker.prefetch.PREFETCH_MAX_BYTES", 256 * 1024)
    app = pgq.App(pgq_dsn)

    @app.task
    async def big(blob: str) -> None:
        pass

    async def before(queue: AsyncQueue) -> None:
        await queue.enqueue_many([pgq.JobSpec("big", {"blob": f"{i:05d}" + "x" * 32_000}) for i in range(300)])

    asyncio.run(run_worker_until(app, all_finished, before=before, concurrency=4))
    assert db.status_counts() == {"succeeded": 300}
    # The jobs of one claim share its transaction's started_at.
    biggest = db.value("SELECT max(n) FROM (SELECT count(*) AS n FROM pgq.jobs GROUP BY started_at) c")
    assert 4 < biggest <= 4 + 8, biggest


def test_due_jobs_it_cannot_take_make_a_worker_back_off_not_spin(
    pgq_dsn: str, db: DB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due job of a kind at its concurrency limit cannot be claimed until a running one ends: the
    worker must ask again less and less often (from 50 ms up to its poll interval), not every few
    milliseconds; and it still takes the job once the limit allows."""
    from pgq import _ops

    app = pgq.App(pgq_dsn)

    @app.task(concurrency_limit=1)
    async def limited(i: int) -> None:
        pass

    claims = 0
    real_claim = _ops.claim

    def counting_claim(**kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return real_claim(**kwargs)

    monkeypatch.setattr(_ops, "claim", counting_claim)

    async def main() -> None:
        async with pgq.AsyncQueue(pgq_dsn) as queue:
            await queue.set_concurrency_limit("limited", 1)
            await queue.enqueue_many([pgq.JobSpec("limited", {"i": 1}), pgq.JobSpec("limited", {"i": 2})])
            [held] = await queue.claim(worker="elsewhere", limit=1, lease=60)  # the limit is reached
            worker = pgq.Worker(app, concurrency=4, poll_interval=1.0, lease=5)
            runner = asyncio.create_task(worker.run_async())
            await asyncio.sleep(1.5)
            spent = claims
            await queue.complete(held)  # frees the limit: the worker takes the other job
            await async_wait_for(lambda: all_finished(queue), 10, "the worker to run the second job")
            worker.stop()
            await asyncio.wait_for(runner, 10)
        assert spent <= 12, spent  # 50, 100, 200, 400 ms ... apart, rather than one claim every 5 ms

    asyncio.run(main())
    assert db.status_counts() == {"succeeded": 2}


def test_prefetched_jobs_wait_for_a_slot_and_go_back_at_shutdown(pgq_dsn: str, db: DB) -> None:
    """With prefetch, a worker holds more jobs than it runs: running never exceeds the concurrency,
    and at shutdown the held jobs are back in `queued` at once, their claim's attempt given back."""
    app = pgq.App(pgq_dsn)
    running = 0
    peak = 0
    release = asyncio.Event()

    @app.task
    async def slow() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    async def main() -> pgq.Worker:
        worker = pgq.Worker(app, concurrency=2, prefetch=3, drain_timeout=5, lease=60)
        runner = asyncio.create_task(worker.run_async())
        for _ in range(10):
            await slow.defer_async()
        await async_wait_for(lambda: asyncio.sleep(0, running == 2 and worker.stats["claimed"] == 2), 5,
                             "two running")
        await async_wait_for(lambda: asyncio.sleep(0, db.value(
            "SELECT count(*) FROM pgq.jobs WHERE status = 'running'") == 5), 5, "three more held")
        assert peak == 2  # held, not started
        worker.stop()
        await asyncio.sleep(0.2)
        release.set()  # the two running ones finish within the drain timeout
        await asyncio.wait_for(runner, 10)
        return worker

    worker = asyncio.run(main())
    assert peak == 2
    assert db.status_counts() == {"succeeded": 2, "queued": 8}
    assert db.value("SELECT max(attempts) FROM pgq.jobs WHERE status = 'queued'") == 0
    assert worker.stats["released"] == 3


def _stall_acknowledgements(pgq_dsn: str, app: pgq.App, specs: list[pgq.JobSpec], runs: list[Any], *,
                            at_least: int, while_stalled: Callable[[int], None], **settings: Any) -> None:
    """Enqueue `specs`, make every acknowledgement wait for a lock, and run a worker of `app` (with
    `settings`) until `at_least` jobs ran (each handler appends to `runs`) and then none for a second;
    call `while_stalled(jobs run by then)` with the lock still held. Then release the lock and wait
    until every job has finished."""

    async def main() -> None:
        async with pgq.AsyncQueue(pgq_dsn) as queue:
            await queue.enqueue_many(specs)
            # Every acknowledgement statement writes to pgq.key_watermarks (for jobs with a dedupe key),
            # so it waits for this lock; claims do not touch that table.
            blocker = await psycopg.AsyncConnection.connect(pgq_dsn)
            await blocker.execute("LOCK TABLE pgq.key_watermarks IN SHARE MODE")
            worker = pgq.Worker(app, lease=30, poll_interval=0.2, **settings)
            runner = asyncio.create_task(worker.run_async())
            try:
                await async_wait_for(lambda: asyncio.sleep(0, len(runs) >= at_least), 10, f"{at_least} jobs run")
                await asyncio.sleep(1.0)
                stalled = len(runs)
                await asyncio.sleep(1.0)
                assert len(runs) == stalled, "claims went on while nothing could be acknowledged"
                while_stalled(stalled)
            finally:
                await blocker.close()  # releases the lock: the acknowledgements go through
            await async_wait_for(lambda: all_finished(queue), 20, "every job to finish")
            worker.stop()
            await asyncio.wait_for(runner, 20)

    asyncio.run(main())


def test_claims_pause_while_acknowledgements_cannot_get_through(pgq_dsn: str, db: DB) -> None:
    """Finished jobs whose acknowledgement cannot be sent (here it waits for a lock) pile up only to a
    bound: twice the prefetch buffer (at least ack_batch and twice the concurrency). Then the worker
    claims nothing more until they are through, so it never runs off with the whole queue; once
    through, every job has succeeded, each run exactly once."""
    app = pgq.App(pgq_dsn)
    runs: list[int] = []

    @app.task
    async def quick(i: int) -> None:
        runs.append(i)

    def while_stalled(stalled: int) -> None:
        # The bound is 2 x 20 = 40 finished jobs waiting; the last claim before it was reached added
        # at most the 4 slots and 20 held jobs it had room for.
        assert 40 <= stalled <= 40 + 4 + 20 - 1, stalled
        assert db.status_counts() == {"running": stalled, "queued": 400 - stalled}

    _stall_acknowledgements(pgq_dsn, app, [pgq.JobSpec("quick", {"i": i}) for i in range(400)], runs,
                            at_least=40, while_stalled=while_stalled, concurrency=4, prefetch=20, ack_batch=10)
    assert db.status_counts() == {"succeeded": 400}
    assert sorted(runs) == list(range(400))


def test_claims_pause_sooner_for_big_payloads_while_acknowledgements_cannot_get_through(
    pgq_dsn: str, db: DB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished job keeps its payload until acknowledged, so with big payloads the backlog bound is
    not `ack_batch` (1,000 by default: a gigabyte of 1 MB payloads) but twice the jobs the buffer's
    byte cap allows. Lowered here to 64 kB with payloads of 16 kB: the cap is the floor, the 4 slots,
    and the bound 8 finished jobs."""
    monkeypatch.setattr("pgq.worker.prefetch.PREFETCH_MAX_BYTES", 64 * 1024)
    app = pgq.App(pgq_dsn)
    runs: list[int] = []

    @app.task
    async def big(i: int, blob: str) -> None:
        runs.append(i)

    def while_stalled(stalled: int) -> None:
        # The last claim before the bound was reached added at most the 4 slots and 4 held jobs.
        assert 8 <= stalled <= 8 + 4 + 4 - 1, stalled
        assert db.status_counts() == {"running": stalled, "queued": 100 - stalled}

    _stall_acknowledgements(pgq_dsn, app, [pgq.JobSpec("big", {"i": i, "blob": "x" * 16_000}) for i in range(100)],
                            runs, at_least=8, while_stalled=while_stalled, concurrency=4)
    assert db.status_counts() == {"succeeded": 100}
    assert sorted(runs) == list(range(100))


def test_run_async_drains_every_worker_of_the_loop_and_leaves_a_signal_the_application_handles(
        pgq_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    app = pgq.App(pgq_dsn)
    caplog.set_level(logging.INFO, logger="pgq.worker")
    mine: list[int] = []
    # SIGINT as a terminal leaves it (a suite run as a background job inherits it ignored).
    previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, lambda sig, _frame: mine.append(sig))  # the host application's

    async def main() -> None:
        workers = [pgq.Worker(app, lease=5, poll_interval=0.5) for _ in range(2)]
        runs = [asyncio.create_task(w.run_async()) for w in workers]

        async def started() -> bool:
            return sum("started: queues" in r.getMessage() for r in caplog.records) == 2

        await async_wait_for(started, 15, "both workers to start")
        os.kill(os.getpid(), signal.SIGTERM)
        await async_wait_for(lambda: asyncio.sleep(0, bool(mine)), 5, "the application's handler to run")
        assert not any(r.done() for r in runs)  # SIGTERM is the application's: the workers run on
        os.kill(os.getpid(), signal.SIGINT)  # nobody else's (asyncio.run's Ctrl-C): both drain
        await asyncio.wait_for(asyncio.gather(*runs), 20)
        sigint = signal.getsignal(signal.SIGINT)
        assert isinstance(sigint, functools.partial)  # asyncio.run's own Ctrl-C handling is back

    try:
        asyncio.run(main())
        assert mine == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is not previous
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_sigint)
    assert any("SIGTERM is handled by the application" in r.getMessage() for r in caplog.records)
    assert sum("SIGINT received: draining" in r.getMessage() for r in caplog.records) == 2


def test_worker_warns_at_start_about_ticks_it_does_not_serve_and_queues_no_task_uses(
        pgq_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(queue="mail")
    def send_email(to: str) -> None:
        pass

    @app.periodic(every=3600)
    def tidy_up() -> None:  # ticks go to queue default
        pass

    @app.periodic(every=3600, queue="mail", name="digest")
    def mail_digest() -> None:
        pass

    caplog.set_level(logging.INFO, logger="pgq.worker")

    async def started(_: AsyncQueue) -> bool:  # the warnings come right after the start line
        return any("started: queues" in r.getMessage() for r in caplog.records)

    asyncio.run(run_worker_until(app, started, queues=["mail", "mial"]))
    warnings = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "worker_queue_warning"]
    assert len(warnings) == 2, warnings
    assert "periodic task 'tidy_up'" in warnings[0] and "queue 'default'" in warnings[0]
    assert "queue 'mial'" in warnings[1] and "no task of this app" in warnings[1]
    # A worker serving every queue, or the queues its tasks and ticks use, has nothing to say.
    assert pgq.worker.queue_warnings(app, None) == []
    assert pgq.worker.queue_warnings(app, ["mail", "default"]) == []
    assert pgq.worker.queue_warnings(app, ["mail"], periodic=False) == []


def test_a_worker_run_in_a_thread_as_docs_testing_does_warns_of_nothing(pgq_dsn: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    def noop() -> None:
        return None

    worker = pgq.Worker(app, poll_interval=0.2, lease=5)
    with caplog.at_level(logging.INFO, logger="pgq.worker"):
        thread = threading.Thread(target=worker.run)
        thread.start()
        noop.defer()
        deadline = time.monotonic() + 20
        while worker.stats["succeeded"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.stop()
        thread.join(20)
    app.close()
    assert worker.stats["succeeded"] == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("not in the main thread" in r.getMessage() for r in caplog.records)  # said, at INFO
