"""Maintenance steps (`run_once()` each), leader election, the next-due query and the listener, against
a real PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Any

import psycopg
import pytest

import pgq
from pgq import AsyncQueue, _ops, _sql
from pgq.listener import Listener
from pgq.metrics import Metrics
from pgq.worker.maintenance import (
    PERIODIC_LOCK_KEY,
    RESCUE_LOCK_KEY,
    RETENTION_LOCK_KEY,
    PeriodicEnqueuer,
    Rescuer,
    Retention,
)

from .conftest import DB, LISTENER, FrozenClient, async_wait_for, freeze_mid_claim, run_worker_until, wait_for

MAINTENANCE_IDLE_LIMIT_S = 5  # _ops.TRANSACTION_IDLE_LIMIT, which sql/maintenance_lock.sql sets


def holding_lock(dsn: str, key: str) -> psycopg.Connection[Any]:
    """A connection inside a transaction that leads maintenance step `key` (another worker's run)."""
    conn = psycopg.connect(dsn)
    row = conn.execute("SELECT pgq.lead(%s)", (key,)).fetchone()
    assert row == (True,)
    return conn


def test_rescuer_requeues_expired_leases_and_fails_exhausted_ones(pgq_dsn: str, db: DB) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            await queue.enqueue("a")
            await queue.enqueue("b", max_attempts=1)
            await queue.enqueue("c")
            await queue.claim(worker="dead", limit=2, lease=0.05)  # a and b, then the worker "dies"
            await queue.claim(worker="alive", limit=1, lease=60)
            db.rows("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s' WHERE claimed_by = 'dead'")
            metrics = Metrics("w", queues=None, concurrency=1)
            rescuer = Rescuer(queue, metrics=metrics)
            result = await rescuer.run_once()
            assert result.leader and result.counts == {"requeued": 1, "failed": 1}
            again = await rescuer.run_once()
            assert again.leader and again.counts == {"requeued": 0, "failed": 0}
            assert [metrics.count("rescued", "default", k) for k in "abc"] == [1, 1, 0]

    asyncio.run(main())
    assert {r["kind"]: r["status"] for r in db.rows("SELECT kind, status::text FROM pgq.jobs")} == {
        "a": "queued", "b": "failed", "c": "running"}


def test_rescue_that_fails_a_job_for_good_enqueues_its_on_failure_in_the_same_transaction(
        pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(queue="alerts")
    def alert(job_id: int, error: str) -> None:
        return None

    @app.task(on_failure=alert)
    def fragile() -> None:
        return None

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            last = await queue.enqueue("fragile", max_attempts=1)
            await queue.enqueue("fragile", max_attempts=2)  # attempts left: requeued, no alert
            await queue.enqueue("other", max_attempts=1)  # not this app's task: failed, no alert
            await queue.claim(worker="dead", limit=3, lease=60)
            db.rows("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s'")
            result = await Rescuer(queue, tasks=app.tasks).run_once()
            assert result.counts == {"requeued": 1, "failed": 2}
            assert db.rows("SELECT queue, payload FROM pgq.jobs WHERE kind = 'alert'") == [
                {"queue": "alerts", "payload": {"job_id": last, "error": "lease expired on the last attempt "
                                                                         "(its worker died or hung)"}}]

    asyncio.run(main())


def test_a_leader_stalled_inside_its_run_loses_the_lock_and_another_worker_rescues(pgq_dsn: str, db: DB) -> None:
    # A worker that hangs (a paused process, an event loop blocked by a CPU-bound async handler) right
    # after taking the rescue lock must not stop every other worker from rescuing for as long as it
    # hangs: the lock statement bounds the idle time of its transaction (found by the chaos test).
    stalled = psycopg.connect(pgq_dsn)  # not autocommit: the lock statement opens the run's transaction
    try:
        leader = stalled.execute(_sql.query("maintenance_lock"),
                                 {"key": RESCUE_LOCK_KEY, "idle_limit": _ops.TRANSACTION_IDLE_LIMIT}).fetchone()
        assert leader is not None and leader[0] is True  # ... and now this "worker" hangs

        async def main() -> None:
            async with AsyncQueue(pgq_dsn) as queue:
                job_id = await queue.enqueue("k")
                await queue.claim(worker="dead", limit=1, lease=0.01)
                db.rows("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s'")
                rescuer = Rescuer(queue)
                assert not (await rescuer.run_once()).leader

                async def rescued() -> bool:
                    return (await rescuer.run_once()).counts.get("requeued") == 1

                await async_wait_for(rescued, MAINTENANCE_IDLE_LIMIT_S + 10, "another worker to rescue the job",
                                     interval=0.2)
                job = await queue.get(job_id)
                assert job is not None and job.status == pgq.JobStatus.QUEUED

        asyncio.run(main())
        # The server ended the hung transaction's session (the error may be lost with the connection).
        with pytest.raises((psycopg.errors.IdleInTransactionSessionTimeout, psycopg.OperationalError)):
            stalled.execute("SELECT 1")
    finally:
        stalled.close()


def test_rescuer_ends_a_session_stuck_sending_a_claim_to_a_frozen_client(
        pgq_dsn: str, db: DB, caplog: pytest.LogCaptureFixture) -> None:
    # The claim never commits, so no lease covers its jobs: they stay queued, locked, skipped by every
    # other claim's SKIP LOCKED, for as long as the client stays frozen, unless the session is ended.
    n = 250  # one claim statement takes at most 256 (pgq.claim's reservations)
    frozen = freeze_mid_claim(pgq_dsn, db, n)
    # Someone else's statement stuck the same way is left alone: only pgq's writing statements count.
    bystander = FrozenClient(pgq_dsn, "SELECT repeat('y', 1000) FROM generate_series(1, 20000)")
    try:
        wait_for(lambda: bystander.wait_event(db) == "ClientWrite", 10, "the bystander to block writing")

        async def main() -> list[pgq.Claim]:
            async with AsyncQueue(pgq_dsn) as queue:
                assert await queue.claim(worker="other", limit=10) == []  # the jobs are held hostage
                patient = await Rescuer(queue, stalled_after=600).run_once()
                assert patient.leader and patient.counts == {"requeued": 0, "failed": 0, "sessions_ended": 0}
                await asyncio.sleep(0.3)
                with caplog.at_level(logging.WARNING, logger="pgq"):
                    result = await Rescuer(queue, stalled_after=0.2).run_once()
                assert result.leader and result.counts == {"requeued": 0, "failed": 0, "sessions_ended": 1}
                claimed: list[pgq.Claim] = []

                async def all_claimed() -> bool:
                    claimed.extend(await queue.claim(worker="other", limit=n, lease=60))
                    return len(claimed) == n

                await async_wait_for(all_claimed, 10, "the released jobs to be claimable", interval=0.1)
                return claimed

        claimed = asyncio.run(main())
        assert sorted(c.job.payload["n"] for c in claimed) == list(range(n))
        assert {c.job.attempts for c in claimed} == {1}  # the frozen claim was rolled back, not counted
        wait_for(lambda: frozen.wait_event(db) is None, 10, "the frozen client's session to end")
        assert bystander.wait_event(db) == "ClientWrite"
        ended = [r for r in caplog.records if getattr(r, "event", None) == "stalled_session_end"]
        assert len(ended) == 1 and f"session {frozen.pid} " in ended[0].getMessage()
        assert "job_claim_fast" in ended[0].getMessage()
    finally:
        frozen.close()
        bystander.close()


def test_a_worker_runs_the_jobs_of_a_claim_stuck_on_a_frozen_client(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    ran: list[int] = []

    @app.task
    def big(blob: str, n: int) -> None:
        ran.append(n)

    frozen = freeze_mid_claim(pgq_dsn, db, 300)
    try:
        async def all_done(queue: AsyncQueue) -> bool:
            return db.status_counts() == {"succeeded": 300}

        # A worker's rescue ends sessions stalled for its lease.
        asyncio.run(run_worker_until(app, all_done, timeout=30, lease=1.0, rescue_interval=0.3))
    finally:
        frozen.close()
    assert sorted(ran) == list(range(300))
    assert db.value("SELECT max(attempts) FROM pgq.jobs") == 1


def test_every_sql_file_is_classed_as_writing_or_read_only() -> None:
    # The stalled-session step ends only sessions stuck in a writing statement: a new .sql file must
    # be put in one of the two lists, or sessions stuck in it would be left holding their locks.
    files = {path.stem for path in _sql.data_dir("sql").glob("*.sql")}
    writing, read_only = set(_ops.WRITING_STATEMENTS), set(_ops.READ_ONLY_STATEMENTS)
    assert not writing & read_only
    assert writing | read_only == files
    for name in files:  # and each file's opening comment names it, which is how the step finds it
        assert _sql.query(name).startswith(f"-- {name}:"), name


@pytest.mark.parametrize("step", ["rescue", "retention", "periodic"])
def test_a_step_is_skipped_while_another_worker_holds_its_lock(pgq_dsn: str, db: DB, step: str) -> None:
    app = pgq.App(pgq_dsn)
    app.periodic(every=1)(lambda: None)
    key = {"rescue": RESCUE_LOCK_KEY, "retention": RETENTION_LOCK_KEY, "periodic": PERIODIC_LOCK_KEY}[step]

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            runner = {"rescue": Rescuer(queue), "retention": Retention(queue, 60),
                      "periodic": PeriodicEnqueuer(queue, app.periodic_tasks)}[step]
            other = holding_lock(pgq_dsn, key)
            try:
                assert not (await runner.run_once()).leader
            finally:
                other.rollback()  # returns once the lock is released (close() alone does not wait)
                other.close()
            assert (await runner.run_once()).leader

    asyncio.run(main())


def test_retention_deletes_only_jobs_finished_long_enough_ago(pgq_dsn: str, db: DB) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            for kind in ("old1", "old2", "recent", "active"):
                await queue.enqueue(kind)
            for claim in await queue.claim(worker="w", limit=3, lease=60):
                if claim.job.kind != "active":
                    await queue.complete(claim)
            db.rows("UPDATE pgq.jobs SET finished_at = now() - interval '8 days' WHERE kind LIKE 'old%%'")
            result = await Retention(queue, dt.timedelta(days=7).total_seconds(), batch=1).run_once()
            # Revision 0033: whole days dropped first (none here: the jobs finished today).
            assert result.leader and result.counts == {"dropped": 0, "dropped_jobs": 0, "skipped": 0, "deleted": 2}

    asyncio.run(main())
    assert sorted(r["kind"] for r in db.rows("SELECT kind FROM pgq.jobs")) == ["active", "recent"]


def test_periodic_enqueues_each_tick_once_and_never_revives_a_finished_tick(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.periodic(every=1, name="beat", queue="cron")
    def beat() -> None:
        pass

    def keys() -> list[str]:
        return [r["dedupe_key"] for r in db.rows("SELECT dedupe_key FROM pgq.jobs ORDER BY id")]

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            # Start just after a tick (1 s ticks; the server's clock is this machine's), so that the
            # three runs below that must see the same tick cannot straddle the next one.
            await asyncio.sleep(1.02 - time.time() % 1.0)
            first = PeriodicEnqueuer(queue, app.periodic_tasks)
            result = await first.run_once()
            assert result.counts == {"enqueued": 1, "due": 1}  # a first run takes only the latest tick
            [key] = keys()
            assert key.startswith("periodic:beat:")
            # Another worker (a fresh enqueuer) looking at the same tick finds its job and adds nothing.
            assert (await PeriodicEnqueuer(queue, app.periodic_tasks).run_once()).counts["enqueued"] == 0
            # The tick's job finishes (cancelled here) and stays; it is still never enqueued again.
            [job] = await queue.list()
            await queue.cancel(job.id)
            assert (await PeriodicEnqueuer(queue, app.periodic_tasks).run_once()).counts["enqueued"] == 0
            # The next tick comes: one more job.
            tick = int(key.rsplit(":", 1)[1])
            await async_wait_for(lambda: asyncio.sleep(0, time.time() >= tick + 1.05), 3, "the next tick")
            assert (await first.run_once()).counts["enqueued"] == 1
            assert first.next_run_in(True, 30) <= 1.01

    asyncio.run(main())
    ticks = [int(k.rsplit(":", 1)[1]) for k in keys()]
    assert len(ticks) == 2 and ticks[1] == ticks[0] + 1
    assert {r["queue"] for r in db.rows("SELECT queue FROM pgq.jobs")} == {"cron"}


def test_periodic_cron_first_run_enqueues_the_latest_minute_tick(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    app.periodic(cron="* * * * *", name="minutely", kwargs={"x": 1})(lambda x: None)

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            assert (await PeriodicEnqueuer(queue, app.periodic_tasks).run_once()).counts["enqueued"] == 1

    asyncio.run(main())
    row = db.rows("SELECT dedupe_key, payload, extract(epoch FROM now())::float8 AS now FROM pgq.jobs")[0]
    tick = int(row["dedupe_key"].rsplit(":", 1)[1])
    assert tick % 60 == 0 and 0 <= row["now"] - tick < 61
    assert row["payload"] == {"x": 1}


def test_next_run_at_reports_the_earliest_queued_job_of_the_queues(pgq_dsn: str, db: DB) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            assert await queue._run(_ops.next_run_at(None)) is None
            await queue.enqueue("x", queue="a", delay=30, priority=5)
            await queue.enqueue("x", queue="a", delay=10, priority=9)
            await queue.enqueue("x", queue="b", delay=5)
            await queue.enqueue("x", queue="c")
            await queue.claim(worker="w", queues=["c"])  # running jobs do not count
            a = await queue._run(_ops.next_run_at(["a"]))
            assert a is not None and 9 < a <= 10
            both = await queue._run(_ops.next_run_at(["a", "b"]))
            assert both is not None and 4 < both <= 5
            every = await queue._run(_ops.next_run_at(None))
            assert every is not None and 4 < every <= 5
            assert await queue._run(_ops.next_run_at(["c", "zzz"])) is None
            await queue.enqueue("x", queue="a")
            now = await queue._run(_ops.next_run_at(["a"]))
            assert now is not None and now <= 0

    asyncio.run(main())


def test_listener_reconnects_after_its_connection_is_killed(pgq_dsn: str, db: DB) -> None:
    received: list[str] = []
    connects: list[float] = []

    async def main() -> Listener:
        listener = Listener(pgq_dsn, channels={"pgq": received.append},
                            on_connect=lambda: connects.append(time.monotonic()), idle_check=0.5)
        task = asyncio.create_task(listener.run())
        try:
            await async_wait_for(lambda: asyncio.sleep(0, listener.connected), 5, "the listener to connect")
            db.rows("NOTIFY pgq, 'q1'")
            await async_wait_for(lambda: asyncio.sleep(0, "q1" in received), 5, "the first notification")
            killed = db.value(f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {LISTENER}")
            assert killed == 1

            async def notified_again() -> bool:
                db.rows("NOTIFY pgq, 'q2'")
                return "q2" in received

            await async_wait_for(notified_again, 10, "a notification after the reconnect", interval=0.1)
        finally:
            listener.stop()
            await asyncio.wait_for(task, 5)
        return listener

    listener = asyncio.run(main())
    assert listener.reconnects >= 1 and len(connects) >= 2
    assert not listener.connected


def test_worker_keeps_working_when_its_listen_connection_dies(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    def ping() -> None:
        pass

    async def main() -> None:
        worker = pgq.Worker(app, poll_interval=0.3, lease=5)
        runner = asyncio.create_task(worker.run_async())
        try:
            async with AsyncQueue(pgq_dsn) as queue:
                async def listening() -> bool:
                    return bool(db.value(f"SELECT count(*) FROM pg_stat_activity WHERE {LISTENER}"))

                await async_wait_for(listening, 5, "the worker's LISTEN")
                db.rows(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {LISTENER}")
                for _ in range(3):
                    await queue.enqueue("ping")

                async def done() -> bool:
                    return db.status_counts() == {"succeeded": 3}

                await async_wait_for(done, 10, "the jobs")
        finally:
            worker.stop()
            await asyncio.wait_for(runner, 10)

    asyncio.run(main())
