"""Jobs of a kind a worker's app has no task for: handed back, never failed (the rolling-deploy rule,
docs/operations.md)."""

from __future__ import annotations

import asyncio
import logging

import pytest

import pgq
from pgq import AsyncQueue
from pgq.cli.status import format_status
from pgq.worker import runner as runner_module

from .conftest import DB, async_wait_for

UNKNOWN = "SELECT count(*) FROM pgq.jobs WHERE kind = 'resize' AND status = 'queued' AND attempts = 0 " \
          "AND last_error LIKE 'no worker of queue ''default'' knows kind ''resize''%%'"


def test_unknown_kind_waits_for_a_new_worker_beside_an_old_one_without_spending_attempts(
        pgq_dsn: str, db: DB, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(runner_module, "UNKNOWN_KIND_BACKOFF", (0.2, 0.4))  # 30 s and 5 min in production
    caplog.set_level(logging.WARNING, logger="pgq.worker")
    old = pgq.App(pgq_dsn)  # the deploy before `resize` existed
    new = pgq.App(pgq_dsn)
    resized: list[int] = []

    @old.task(name="ping")
    def old_ping() -> None:
        pass

    @new.task(name="ping")
    def new_ping() -> None:
        pass

    @new.task
    def resize(n: int) -> None:
        resized.append(n)

    async def main() -> None:
        async with AsyncQueue(pgq_dsn) as queue:
            await queue.enqueue_many([pgq.JobSpec("resize", {"n": n}) for n in range(20)])
            await queue.enqueue("ping")
            old_worker = pgq.Worker(old, lease=5.0, poll_interval=0.1, concurrency=4)
            old_run = asyncio.create_task(old_worker.run_async())
            try:
                async def handed_back() -> bool:
                    assert db.status_counts("resize").get("failed", 0) == 0, "the old worker failed a resize job"
                    assert not old_run.done()
                    return bool(db.value(UNKNOWN) == 20 and db.status_counts("ping") == {"succeeded": 1})

                # The old worker alone: every resize job comes back queued, with the reason, no attempt spent.
                await async_wait_for(handed_back, 15, "the old worker to hand every resize job back")
                stats = await queue.stats()
                assert [r["unknown_kinds"] for r in stats] == [{"resize": 20}]
                assert "default: 20 'resize'" in format_status(stats)

                # The new deploy starts beside the old worker: it runs them all, once each.
                new_worker = pgq.Worker(new, lease=5.0, poll_interval=0.1)
                new_run = asyncio.create_task(new_worker.run_async())
                try:
                    async def all_resized() -> bool:
                        assert not new_run.done() and not old_run.done()
                        return bool(db.status_counts("resize") == {"succeeded": 20})

                    await async_wait_for(all_resized, 15, "the new worker to run every resize job")
                finally:
                    new_worker.stop()
                    await asyncio.wait_for(new_run, 20)
                assert [r["unknown_kinds"] for r in await queue.stats()] == [{}]
            finally:
                old_worker.stop()
                await asyncio.wait_for(old_run, 20)

    asyncio.run(main())
    assert sorted(resized) == list(range(20))
    assert db.rows("SELECT DISTINCT attempts FROM pgq.jobs WHERE kind = 'resize'") == [{"attempts": 1}]
    warnings = [r.getMessage() for r in caplog.records if "no task of this worker's app knows" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per (kind, queue), however often the jobs came back
    assert "'resize'" in warnings[0] and "'default'" in warnings[0]


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
