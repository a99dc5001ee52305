"""The worker registry (pgq.workers, revision 0013): workers in subprocesses register at start, keep
their rows fresh with their maintenance runs, mark them draining, delete them on a clean stop, and a
killed worker's row goes stale and is pruned by a live worker's rescue; explain sees it all."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest

import pgq
from pgq.worker.registry import Registry

from .conftest import DB, WorkerProcess, run_worker_until, wait_for


def _by_name(queue: pgq.Queue) -> dict[str, pgq.WorkerInfo]:
    return {w.claimed_by: w for w in queue.workers()}


@pytest.mark.slow
def test_workers_register_stop_cleanly_and_a_killed_one_is_pruned(
        pgq_dsn: str, db: DB, spawn_worker: Callable[..., WorkerProcess]) -> None:
    # lease 2 s: each worker refreshes its row with its rescue run every second, a killed one is
    # stale after 3.3 s and pruned after 6 s.
    common = ("--lease", "2", "--poll-interval", "0.2", "--drain-timeout", "2")
    a = spawn_worker("--name", "reg-a", "--queue", "work", "--concurrency", "3", *common)
    b = spawn_worker("--name", "reg-b", "--queue", "work", "--queue", "other", *common)
    with pgq.Queue(pgq_dsn) as queue:
        both = wait_for(lambda: (w := _by_name(queue)).keys() >= {"reg-a", "reg-b"} and w, 30,
                        "both workers to register")
        wa = both["reg-a"]
        assert (wa.pid, wa.queues, wa.slots, wa.state, wa.live, wa.running_count) == (
            a.pid, ("work",), 3, "running", True, 0)
        assert {"record", "hold"} <= set(wa.kinds)
        assert both["reg-b"].queues == ("work", "other")
        first_seen = wa.last_seen
        wait_for(lambda: _by_name(queue)["reg-a"].last_seen > first_seen, 10, "a refresh of reg-a's row")

        # An idle queue's explanation names what the registry knows.
        unknown = queue.enqueue("nobody_knows", queue="work")
        unserved = queue.enqueue("record", {"n": 1}, queue="nowhere")
        # A worker claims the unknown kind once and hands it back, scheduled: seen queued, either way
        # no live worker knows it.
        wait_for(lambda: queue.explain(unknown).codes[-1] == "unknown_kind", 10, "unknown_kind")
        assert queue.explain(unserved).codes == ("no_live_worker",)

        # A paused queue that a live worker serves, with a kind it knows: paused is the only reason.
        assert queue.pause("other")
        held = queue.enqueue("record", {"n": 2}, queue="other")
        assert queue.explain(held).codes == ("queue_paused",)

        # SIGKILL: the row stays, goes stale, and a live worker's rescue prunes it.
        b.signal(signal.SIGKILL)
        b.wait(10)
        wait_for(lambda: not _by_name(queue)["reg-b"].live, 15, "reg-b's row to go stale")
        wait_for(lambda: "reg-b" not in _by_name(queue), 15, "reg-b's row to be pruned")

        # A clean stop deletes the row at once.
        a.signal(signal.SIGTERM)
        assert a.wait(20) == 0
        assert _by_name(queue) == {}
        assert queue.explain(unknown).codes[-1] == "no_live_worker"


def test_a_draining_worker_shows_its_job_in_flight_then_leaves(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    started, gate = asyncio.Event(), asyncio.Event()

    @app.task(name="gated", queue="reg")
    async def gated() -> None:
        started.set()
        await gate.wait()

    seen: dict[str, pgq.WorkerInfo] = {}
    after: list[pgq.WorkerInfo] = []

    async def scenario() -> None:
        async def running(queue: pgq.AsyncQueue) -> bool:
            rows = await queue.workers()
            if rows and rows[0].running_count == 1:
                seen["running"] = rows[0]
                return True
            return False

        worker = pgq.Worker(app, queues=["reg"], claimed_by="reg-drain", lease=5, poll_interval=0.2,
                            drain_timeout=10)
        task = asyncio.create_task(worker.run_async())
        async with pgq.AsyncQueue(pgq_dsn) as queue:
            await queue.enqueue("gated", queue="reg")
            deadline = asyncio.get_running_loop().time() + 15
            await asyncio.wait_for(started.wait(), 15)  # running its handler, not only claimed
            while not await running(queue):
                assert asyncio.get_running_loop().time() < deadline, "the registry never showed the job"
                await asyncio.sleep(0.05)
            worker.stop()
            while True:
                rows = await queue.workers()
                assert len(rows) == 1, rows
                row = rows[0]
                if row.state == "draining":
                    seen["draining"] = row
                    break
                assert asyncio.get_running_loop().time() < deadline, "the worker never marked itself draining"
                await asyncio.sleep(0.05)
            gate.set()
            await asyncio.wait_for(task, 20)
            after.extend(await queue.workers())

    asyncio.run(scenario())
    job_ids = seen["running"].running
    assert seen["running"].claimed_by == "reg-drain" and seen["running"].kinds == ("gated",)
    assert seen["draining"].running == job_ids and seen["draining"].live
    assert after == []


def test_a_pruned_row_is_registered_again_at_the_next_refresh(pgq_dsn: str, db: DB) -> None:
    async def scenario() -> tuple[bool, bool, int]:
        async with pgq.AsyncQueue(pgq_dsn) as queue:
            registry = Registry(queue, claimed_by="again", queues=None, kinds=["k"], slots=1, lease_s=5,
                                interval=2.5)
            assert await registry.register()
            first = registry.row
            assert first is not None
            db.rows("DELETE FROM pgq.workers")  # as the prune would
            await queue._run(pgq._ops.worker_seen(first))
            gone = first.found
            await registry.refreshed(first)
            again = registry.row is not None and registry.row.id != first.id
            await registry.unregister()
            return gone, again, len(await queue.workers())

    assert asyncio.run(scenario()) == (False, True, 0)


def test_worker_without_maintenance_still_refreshes_its_row(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(name="noop", queue="bare")
    def noop() -> None:
        pass

    refreshed: list[bool] = []

    async def done(queue: pgq.AsyncQueue) -> bool:
        rows = await queue.workers()
        if not rows:
            return False
        if not refreshed:
            refreshed.append(True)
            db.rows("UPDATE pgq.workers SET last_seen = last_seen - interval '1 hour'")
            return False
        return rows[0].live

    asyncio.run(run_worker_until(app, done, queues=["bare"], maintenance=False, lease=2.0, timeout=15))
    assert db.rows("SELECT count(*) AS n FROM pgq.workers") == [{"n": 0}]
