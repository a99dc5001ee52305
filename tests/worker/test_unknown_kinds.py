"""Jobs of a kind a worker's app has no task for: never claimed, never failed, run once a worker that
knows them comes (the rolling-deploy rule, docs/operations.md; issue #42). The hand-back of workers
before issue #42 is still counted (sql/queue_unknown_kinds.sql)."""

from __future__ import annotations

import asyncio

import pgq
from pgq import AsyncQueue
from pgq.cli.status import format_status
from pgq.worker import runner as runner_module

from .conftest import DB, async_wait_for

RESIZE_ROWS = "SELECT id, xmin::text AS xmin, status::text AS status, attempts, last_error FROM pgq.jobs " \
              "WHERE kind = 'resize' ORDER BY id"


def test_unknown_kinds_stay_untouched_never_delay_known_ones_and_run_once_a_worker_knows_them(
        pgq_dsn: str, db: DB) -> None:
    """Issue #42: 2,000 jobs of a kind the first worker's app does not know, enqueued ahead of known
    jobs in the same queue and in another queue it serves. The worker runs the known jobs and never
    claims the unknown ones: every row of theirs keeps its version (xmin), no attempt, no last_error.
    They are counted (`pgq status`) and explained (unknown_kind); a worker whose app knows the kind,
    started beside the first one (a rolling deploy), runs each of them once. Before, the worker
    claimed and handed back the unknown jobs in batches, with the known ones queued behind them."""
    old = pgq.App(pgq_dsn)  # the deploy before `resize` existed
    new = pgq.App(pgq_dsn)
    ran: list[str] = []
    resized: list[int] = []

    @old.task(name="ping")
    def old_ping() -> None:
        ran.append("ping")

    @old.task(name="pong", queue="other")
    def old_pong() -> None:
        ran.append("pong")

    @new.task(name="ping")
    def new_ping() -> None:
        ran.append("ping")

    @new.task
    def resize(n: int) -> None:
        resized.append(n)

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            await queue.enqueue_many([pgq.JobSpec("resize", {"n": n}) for n in range(2000)])
            before = db.rows(RESIZE_ROWS)
            await queue.enqueue("ping")
            await queue.enqueue("pong", queue="other")
            old_worker = pgq.Worker(old, lease=5.0, poll_interval=0.1, concurrency=4)
            old_run = asyncio.create_task(old_worker.run_async())
            try:
                async def known_ran() -> bool:
                    assert not old_run.done()
                    return sorted(ran) == ["ping", "pong"]

                await async_wait_for(known_ran, 15, "the known jobs to run ahead of the unknown ones")

                async def counted() -> bool:
                    stats = {r["queue"]: r["unknown_kinds"] for r in await queue.stats()}
                    return stats.get("default") == {"resize": 2000}

                await async_wait_for(counted, 15, "pgq status to count the unknown kind")
                assert "default: 2000 'resize'" in format_status(await queue.stats())
                assert (await queue.explain(before[0]["id"])).codes == ("unknown_kind",)
                await asyncio.sleep(0.5)  # a few more polls of the worker: still nothing touched
                assert db.rows(RESIZE_ROWS) == before

                # The new deploy starts beside the old worker: it runs them all, once each.
                new_worker = pgq.Worker(new, lease=5.0, poll_interval=0.1)
                new_run = asyncio.create_task(new_worker.run_async())
                try:
                    async def all_resized() -> bool:
                        assert not new_run.done() and not old_run.done()
                        return bool(db.status_counts("resize") == {"succeeded": 2000})

                    await async_wait_for(all_resized, 60, "the new worker to run every resize job")
                finally:
                    new_worker.stop()
                    await asyncio.wait_for(new_run, 20)
                assert [r["unknown_kinds"] for r in await queue.stats()] == [{}, {}]
            finally:
                old_worker.stop()
                await asyncio.wait_for(old_run, 20)

    asyncio.run(main())
    assert sorted(resized) == list(range(2000))
    assert db.rows("SELECT DISTINCT attempts FROM pgq.jobs WHERE kind = 'resize'") == [{"attempts": 1}]


def test_unknown_kind_delay_doubles_once_per_round_up_to_its_cap_per_kind() -> None:
    rounds: dict[str, tuple[float, float]] = {}

    def delay(kind: str, now: float) -> float:
        return runner_module.unknown_kind_delay(rounds, kind, now, 30.0, 300.0)

    # A burst of 1,000 jobs handed back at once all get the first delay: one round.
    assert {delay("resize", 1000.0 + i / 1000) for i in range(1000)} == {30.0}
    assert delay("crop", 1001.0) == 30.0  # each kind has its own rounds
    assert delay("resize", 1030.0) == 60.0  # they came back 30 s later: the next round
    assert delay("resize", 1031.0) == 60.0
    assert [delay("resize", t) for t in (1090.0, 1210.0, 1450.0, 1750.0, 2050.0)] == [120.0, 240.0, 300.0, 300.0,
                                                                                      300.0]
    assert delay("crop", 1031.0) == 60.0


def test_a_worker_restarted_with_the_task_runs_unknown_jobs_of_every_queue_once(pgq_dsn: str, db: DB) -> None:
    """Unknown kinds in the same queue and in another queue the worker serves, at a better priority
    than its known jobs: the known ones run, the others stay untouched and are explained as
    unknown_kind in both queues. Stopped and started again with the tasks added (the worker learns
    the kinds), it runs each of them once; nothing is left counted."""
    before_deploy = pgq.App(pgq_dsn)
    after_deploy = pgq.App(pgq_dsn)
    ran: list[str] = []
    for app in (before_deploy, after_deploy):
        @app.task(name="ping")
        def ping() -> None:
            ran.append("ping")

        @app.task(name="pong", queue="other")
        def pong() -> None:
            ran.append("pong")

    @after_deploy.task(name="resize")
    def resize() -> None:
        ran.append("resize")

    @after_deploy.task(name="crop", queue="other")
    def crop() -> None:
        ran.append("crop")

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            unknown = await queue.enqueue_many([pgq.JobSpec("resize", priority=0) for _ in range(300)]
                                               + [pgq.JobSpec("crop", queue="other", priority=0) for _ in range(300)])
            rows = db.rows("SELECT id, xmin::text AS xmin, status::text AS status, attempts FROM pgq.jobs "
                           "WHERE kind IN ('resize', 'crop') ORDER BY id")
            await queue.enqueue("ping", priority=5)
            await queue.enqueue("pong", queue="other", priority=5)
            worker = pgq.Worker(before_deploy, lease=5.0, poll_interval=0.1, queues=["default", "other"])
            run = asyncio.create_task(worker.run_async())
            try:
                async def known_ran() -> bool:
                    assert not run.done()
                    return sorted(ran) == ["ping", "pong"]

                await async_wait_for(known_ran, 15, "the known jobs to run")

                async def counted() -> bool:
                    stats = {r["queue"]: r["unknown_kinds"] for r in await queue.stats()}
                    return stats == {"default": {"resize": 300}, "other": {"crop": 300}}

                await async_wait_for(counted, 15, "pgq status to count both queues' unknown kinds")
                for job_id in (unknown[0], unknown[-1]):
                    explained = await queue.explain(job_id)
                    assert explained.codes == ("unknown_kind",)
                    reason = explained.reason("unknown_kind")
                    assert reason is not None and "runs when a worker whose app has the task starts" in reason.detail
                    assert reason.facts["kind"] in ("resize", "crop") and reason.facts["workers"] == [worker.name]
                await asyncio.sleep(0.5)
                assert db.rows("SELECT id, xmin::text AS xmin, status::text AS status, attempts FROM pgq.jobs "
                               "WHERE kind IN ('resize', 'crop') ORDER BY id") == rows
            finally:
                worker.stop()
                await asyncio.wait_for(run, 20)

            worker = pgq.Worker(after_deploy, lease=5.0, poll_interval=0.1, queues=["default", "other"])
            run = asyncio.create_task(worker.run_async())
            try:
                async def all_ran() -> bool:
                    assert not run.done()
                    return bool(db.status_counts("resize") == {"succeeded": 300}
                                and db.status_counts("crop") == {"succeeded": 300})

                await async_wait_for(all_ran, 60, "the restarted worker to run every unknown job")
                assert [r["unknown_kinds"] for r in await queue.stats()] == [{}, {}]
            finally:
                worker.stop()
                await asyncio.wait_for(run, 20)

    asyncio.run(main())
    assert sorted(ran) == sorted(["ping", "pong"] + ["resize"] * 300 + ["crop"] * 300)
    assert db.rows("SELECT DISTINCT attempts FROM pgq.jobs WHERE kind IN ('resize', 'crop')") == [{"attempts": 1}]
