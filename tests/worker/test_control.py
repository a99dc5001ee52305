"""Control of running jobs: a cancel interrupts the handler (async: CancelledError; sync:
`cancel_requested()`), a lost lease stops it, a worker that cannot renew stops its own handlers
before the lease can run out, and progress reaches the database with the heartbeat. Workers run as
real processes where the issue asks for it (tests/worker/runner.py) and in-process otherwise."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgq
from pgq import AsyncQueue, JobStatus

from .conftest import DB, WorkerProcess, run_worker_until, wait_for

Spawn = Callable[..., WorkerProcess]


def notes(db: DB, job_id: int) -> list[str]:
    """The `effects` notes the job's handlers wrote, in order."""
    return [r["note"] for r in db.rows("SELECT note FROM effects WHERE job_id = %s ORDER BY id", (job_id,))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stoppable_async", "stoppable_sync"])
def test_cancel_interrupts_the_handler_in_a_worker_process(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn, kind: str
) -> None:
    # A long lease: the heartbeat (every 10 s) cannot be what tells the worker; the notification is.
    worker = spawn_worker("--concurrency", "1", "--lease", "30", "--name", "w1")
    job_id = pgq_queue.enqueue(kind, {"n": 1, "seconds": 60}, queue="work")
    wait_for(lambda: "started" in notes(db, job_id), 15, "the handler to start")

    cancelled_at = time.monotonic()
    job = pgq_queue.cancel(job_id)
    assert job.status is JobStatus.CANCELLED
    wait_for(lambda: "interrupted" in notes(db, job_id), 5, "the handler to be interrupted")
    latency = time.monotonic() - cancelled_at
    assert latency < 3, latency  # "within about a second"; generous for a loaded CI machine

    # Its slot is free again (concurrency 1), and the cancelled job never runs again.
    other = pgq_queue.enqueue("record", {"n": 2}, queue="work")
    wait_for(lambda: (j := pgq_queue.get(other)) is not None and j.status is JobStatus.SUCCEEDED, 10,
             "the next job to run in the freed slot")
    time.sleep(1.0)
    final = pgq_queue.get(job_id)
    assert final is not None and final.status is JobStatus.CANCELLED and final.attempts == 1
    assert final.result is None  # whatever the handler returned after the cancel was dropped
    assert notes(db, job_id) == ["started", "interrupted"]
    assert worker.alive()
    assert f"job {job_id} {kind}: cancelled" in worker.log()


@pytest.mark.slow
def test_a_stolen_lease_stops_the_handler_within_a_heartbeat(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    # Another session takes the lease over (as a rescue plus a re-claim elsewhere would): the next
    # heartbeat (every lease/3 = 1 s) finds the attempt's token gone and stops the handler.
    worker = spawn_worker("--concurrency", "2", "--lease", "3", "--name", "w1")
    job_id = pgq_queue.enqueue("stoppable_sync", {"n": 1, "seconds": 60}, queue="work")
    wait_for(lambda: "started" in notes(db, job_id), 15, "the handler to start")

    stolen_at = time.monotonic()
    db.rows("UPDATE pgq.jobs SET lease_token = gen_random_uuid(), claimed_by = 'thief' WHERE id = %s", (job_id,))
    wait_for(lambda: "interrupted" in notes(db, job_id), 5, "the handler to stop")
    assert time.monotonic() - stolen_at < 1 + 1.5  # one heartbeat interval, plus slack
    wait_for(lambda: f"job {job_id} stoppable_sync: lease lost" in worker.log(), 5, "the worker to log it")
    # The worker sent no outcome for it: the thief's attempt is untouched.
    row = db.rows("SELECT status::text, claimed_by, result FROM pgq.jobs WHERE id = %s", (job_id,))[0]
    assert row == {"status": "running", "claimed_by": "thief", "result": None}


def test_a_worker_whose_heartbeat_is_blocked_keeps_its_job_and_runs_it_once(
    pgq_dsn: str, db: DB
) -> None:
    # Another session holds the running job's row lock for two leases (a producer's or an operator's
    # open transaction). The heartbeat renews the worker's other leases and waits for this one (a
    # patient renewal) instead of giving up on it; the rescue skips the locked row. So the handler is
    # not stopped, the lease is renewed as soon as the lock is released, and the job runs once.
    # Before, the heartbeat statement was cut after its I/O limit, and the worker stopped the handler.
    app = pgq.App(pgq_dsn)
    finish = threading.Event()
    stopped: list[bool] = []
    state: dict[str, Any] = {}

    @app.task
    def long_job() -> str:
        while not finish.is_set():
            if pgq.cancel_requested():
                stopped.append(True)
                return "stopped"
            time.sleep(0.01)
        return "done"

    lease = 2.0
    blocker = psycopg.connect(pgq_dsn)

    async def finished(queue: AsyncQueue) -> bool:
        now = time.monotonic()
        if "locked" not in state:
            jobs = await queue.list(status=JobStatus.RUNNING)
            if not jobs:
                return False
            blocker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (jobs[0].id,))
            state["locked"], state["id"] = now, jobs[0].id
        elif "released" not in state and now - state["locked"] > 2 * lease:
            state["expired"] = db.value("SELECT lease_expires_at < now() FROM pgq.jobs WHERE id = %s",
                                        (state["id"],))
            blocker.rollback()
            state["released"] = now
        elif "released" in state and now - state["released"] > 0.5:
            finish.set()
        job = await queue.get(state["id"])
        return job is not None and job.status is JobStatus.SUCCEEDED

    async def main() -> None:
        async def before(queue: AsyncQueue) -> None:
            await long_job.defer_async()
        await run_worker_until(app, finished, before=before, lease=lease, timeout=30, drain_timeout=1)

    try:
        asyncio.run(main())
    finally:
        blocker.rollback()
        blocker.close()
        app.close()
    assert stopped == []
    assert state["expired"] is True  # the database's lease had run out while the row was held
    row = db.rows("SELECT status::text, attempts, result, last_error FROM pgq.jobs WHERE id = %s", (state["id"],))
    assert row == [{"status": "succeeded", "attempts": 1, "result": "done", "last_error": None}]


def test_progress_is_stored_with_the_heartbeat_and_with_the_outcome(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    seen: list[Any] = []
    release = threading.Event()

    @app.task
    def steps() -> int:
        for step in range(1, 1001):
            pgq.set_progress({"step": step})  # many calls: stored once per heartbeat, not per call
            if step == 500:
                release.wait(10)
        return 1000

    async def done(queue: AsyncQueue) -> bool:
        jobs = await queue.list(limit=1)
        if not jobs:
            return False
        job = jobs[0]
        if job.status is JobStatus.RUNNING and job.progress is not None:
            seen.append(job.progress)
            release.set()
        return job.status is JobStatus.SUCCEEDED

    async def main() -> None:
        async def before(queue: AsyncQueue) -> None:
            await steps.defer_async()
        await run_worker_until(app, done, before=before, lease=0.9, timeout=20)

    asyncio.run(main())
    app.close()
    assert seen and seen[0] == {"step": 500}  # the heartbeat stored it while the handler waited
    row = db.rows("SELECT status::text, progress, result FROM pgq.jobs")[0]
    assert row == {"status": "succeeded", "progress": {"step": 1000}, "result": 1000}
    # The view shows it too (while running; here the column exists and the job has left it).
    assert db.value("SELECT count(*) FROM pgq.running_jobs") == 0


def test_first_progress_of_an_attempt_is_stored_before_the_first_heartbeat(pgq_dsn: str, db: DB) -> None:
    # A 60 s lease: the heartbeat runs every 20 s, so progress stored before 20 s had passed on the
    # database clock since the claim went with the hurried send, not with a heartbeat.
    app = pgq.App(pgq_dsn)
    second = threading.Event()
    finish = threading.Event()
    stored: list[tuple[Any, float]] = []  # (progress, database seconds since the attempt started)

    @app.task
    def report() -> None:
        pgq.set_progress({"step": 1})
        second.wait(30)
        pgq.set_progress({"step": 2})
        finish.wait(30)

    async def done(queue: AsyncQueue) -> bool:
        row = db.rows("SELECT status::text AS status, progress, "
                      "extract(epoch FROM clock_timestamp() - started_at)::float8 AS age FROM pgq.jobs")[0]
        if row["status"] == "running" and row["progress"] is not None:
            if not stored or stored[-1][0] != row["progress"]:
                stored.append((row["progress"], row["age"]))
            second.set()
            if row["age"] > 3:  # the second value had three seconds to be hurried too, and was not
                finish.set()
        return bool(row["status"] == "succeeded")

    async def main() -> None:
        async def before(queue: AsyncQueue) -> None:
            await report.defer_async()
        await run_worker_until(app, done, before=before, lease=60, timeout=30)

    asyncio.run(main())
    app.close()
    assert stored[0][0] == {"step": 1} and stored[0][1] < 20, stored  # before any heartbeat could run
    assert [p for p, _ in stored] == [{"step": 1}], stored  # the second waits for the heartbeat or outcome
    assert db.rows("SELECT progress FROM pgq.jobs") == [{"progress": {"step": 2}}]  # stored with the outcome


def test_progress_outside_a_handler_and_bad_values_raise(pgq_dsn: str) -> None:
    with pytest.raises(pgq.PgqError):
        pgq.set_progress(1)
    assert pgq.cancel_requested() is False
    app = pgq.App(pgq_dsn)
    errors: list[BaseException] = []

    @app.task
    def bad() -> None:
        try:
            pgq.set_progress({"x": object()})
        except pgq.InvalidJob as exc:
            errors.append(exc)

    async def main() -> None:
        async def before(queue: AsyncQueue) -> None:
            await bad.defer_async()

        async def done(queue: AsyncQueue) -> bool:
            return [j.status for j in await queue.list()] == [JobStatus.SUCCEEDED]
        await run_worker_until(app, done, before=before)

    asyncio.run(main())
    app.close()
    assert len(errors) == 1


def test_without_listen_a_cancel_reaches_the_worker_at_its_next_lease_check(pgq_dsn: str, db: DB) -> None:
    # PgBouncer mode: no LISTEN connection; the worker reads lost leases every poll interval.
    app = pgq.App(pgq_dsn)
    state: dict[str, float] = {}

    @app.task
    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["interrupted"] = time.monotonic()
            raise

    async def done(queue: AsyncQueue) -> bool:
        if "cancelled" not in state:
            running = await queue.list(status=JobStatus.RUNNING)
            if running:
                await queue.cancel(running[0].id)
                state["cancelled"] = time.monotonic()
        return "interrupted" in state

    async def main() -> pgq.Worker:
        async def before(queue: AsyncQueue) -> None:
            await forever.defer_async()
        return await run_worker_until(app, done, before=before, listen=False, poll_interval=0.5,
                                      lease=30, timeout=15)

    worker = asyncio.run(main())
    app.close()
    assert state["interrupted"] - state["cancelled"] < 0.5 + 1.0
    assert worker.stats["cancelled"] == 1
    assert db.status_counts() == {"cancelled": 1}


def test_cancel_of_a_job_still_in_the_prefetch_buffer_drops_it_unstarted(pgq_dsn: str, db: DB) -> None:
    # Concurrency 1 and a slow first job: the second job waits in the worker's buffer, claimed
    # (running in the database) but not started. Cancelling it must drop it, never run it.
    app = pgq.App(pgq_dsn)
    ran: list[str] = []
    gate = threading.Event()

    @app.task
    def slow() -> None:
        ran.append("slow")
        gate.wait(10)

    @app.task
    def quick() -> None:
        ran.append("quick")

    state: dict[str, int] = {}

    async def done(queue: AsyncQueue) -> bool:
        if "cancelled" not in state:
            jobs = {j.kind: j for j in await queue.list(status=JobStatus.RUNNING)}
            if "quick" in jobs and "slow" in jobs:
                await queue.cancel(jobs["quick"].id)
                state["cancelled"] = jobs["quick"].id
                await asyncio.sleep(0.5)  # the notification reaches the worker
                gate.set()
            return False
        return [j.status for j in await queue.list(status=JobStatus.SUCCEEDED)] == [JobStatus.SUCCEEDED]

    async def main() -> pgq.Worker:
        async def before(queue: AsyncQueue) -> None:
            await slow.defer_async()
            await quick.defer_async()
        return await run_worker_until(app, done, before=before, concurrency=1, prefetch=1, lease=30)

    worker = asyncio.run(main())
    app.close()
    if "cancelled" not in state:
        pytest.fail("the worker never held the second job in its buffer")
    assert ran == ["slow"]
    assert worker.stats["cancelled"] == 1
    assert db.status_counts() == {"succeeded": 1, "cancelled": 1}


@pytest.mark.slow
def test_pause_while_three_workers_claim_then_resume(pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn) -> None:
    # Three worker processes drain a queue; the pause lands mid-drain. From the moment pause()
    # returns no job of the queue is claimed (attempts stays put), the running ones finish, other
    # queues go on; after resume every job runs, each exactly once.
    ids = pgq_queue.enqueue_many([pgq.JobSpec("record", {"n": n}, queue="work") for n in range(3000)])
    for name in ("a", "b", "c"):
        spawn_worker("--concurrency", "4", "--lease", "10", "--poll-interval", "0.2", "--name", name)
    wait_for(lambda: db.value("SELECT count(*) FROM effects") >= 300, 30, "the workers to get going")

    assert pgq_queue.pause("work") is True
    claimed = db.value("SELECT count(*) FROM pgq.jobs WHERE attempts > 0")
    wait_for(lambda: db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'running'") == 0, 15,
             "the running jobs to finish")
    time.sleep(1.0)  # several poll intervals: a worker still claiming would show here
    assert db.value("SELECT count(*) FROM pgq.jobs WHERE attempts > 0") == claimed
    assert 300 <= claimed < len(ids), claimed  # paused mid-drain
    assert db.status_counts() == {"succeeded": claimed, "queued": len(ids) - claimed}

    assert pgq_queue.resume("work") is True
    wait_for(lambda: db.status_counts() == {"succeeded": len(ids)}, 60, "the rest to run after resume")
    assert db.value("SELECT count(*) FROM effects") == len(ids)
    assert db.value("SELECT count(DISTINCT job_id) FROM effects") == len(ids)


@pytest.mark.slow
def test_a_rate_limit_holds_across_three_worker_processes(pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn) -> None:
    from tests.integration.test_rate_limits import busiest_window

    max_starts, per_s, total = 30, 0.5, 300
    pgq_queue.set_rate_limit("record", (max_starts, per_s))
    ids = pgq_queue.enqueue_many([pgq.JobSpec("record", {"n": n}, queue="work") for n in range(total)])
    for name in ("a", "b", "c"):
        spawn_worker("--concurrency", "8", "--lease", "10", "--poll-interval", "0.2", "--name", name)
    wait_for(lambda: db.status_counts() == {"succeeded": total}, 60, "every job to run")
    starts = [r["started_at"] for r in db.rows("SELECT started_at FROM pgq.jobs ORDER BY started_at")]
    assert busiest_window(starts, per_s) == max_starts
    assert len({r["claimed_by"] for r in db.rows("SELECT DISTINCT claimed_by FROM pgq.jobs")}) > 1
    assert db.value("SELECT count(*) FROM effects") == len(ids)  # each job ran once


def test_a_tasks_rate_limit_is_stored_by_its_worker_and_obeyed(pgq_dsn: str, db: DB) -> None:
    from tests.integration.test_rate_limits import busiest_window

    app = pgq.App(pgq_dsn)

    @app.task(rate_limit="3/0.5s")
    def limited(n: int) -> int:
        return n

    with pytest.raises(pgq.InvalidJob):
        app.task(name="bad", rate_limit="3 per second")(lambda: None)

    async def done(queue: AsyncQueue) -> bool:
        return [j.status for j in await queue.list(limit=100)] == [JobStatus.SUCCEEDED] * 12

    async def main() -> None:
        async def before(queue: AsyncQueue) -> None:
            await queue.enqueue_many([pgq.JobSpec("limited", {"n": n}) for n in range(12)])
        await run_worker_until(app, done, before=before, concurrency=8, timeout=20)

    asyncio.run(main())
    app.close()
    assert db.rows("SELECT kind, max_starts, per_s FROM pgq.rate_limits") == [
        {"kind": "limited", "max_starts": 3, "per_s": 0.5}]
    starts = [r["started_at"] for r in db.rows("SELECT started_at FROM pgq.jobs ORDER BY started_at")]
    assert busiest_window(starts, 0.5) == 3


@pytest.mark.slow
def test_thousands_of_waits_return_as_worker_processes_finish_their_jobs(
    pgq_dsn: str, pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    total = 3000
    ids = pgq_queue.enqueue_many([pgq.JobSpec("record", {"n": n}, queue="work") for n in range(total)])

    async def wait_all() -> list[pgq.Job]:
        async with AsyncQueue(pgq_dsn, max_size=4) as queue:
            waits = [asyncio.create_task(queue.wait(i, timeout=60)) for i in ids]
            await asyncio.sleep(0.5)  # the waits mark their jobs before the workers start
            for name in ("a", "b"):
                spawn_worker("--concurrency", "8", "--name", name)
            listeners = db.value("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND query LIKE 'LISTEN pgq_finished%%'")
            assert listeners == 1  # every wait shares one connection
            return await asyncio.gather(*waits)

    jobs = asyncio.run(wait_all())
    assert [j.id for j in jobs] == ids
    assert [j.result for j in jobs] == list(range(total))
    assert all(j.status is JobStatus.SUCCEEDED for j in jobs)
