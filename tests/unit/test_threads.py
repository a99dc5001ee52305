"""The worker's thread pool for sync handlers (pgq.worker.threads.Threads): no item is ever stranded,
outcomes reach their futures, blocking handlers run side by side, and shutdown ends every thread.
A blocking handler holds up neither the items nor the outcomes queued behind it."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pgq.worker.threads import Threads as _Threads


def test_every_item_runs_once_with_its_outcome_under_racing_bursts() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pool = _Threads(loop, 16, "t")
        ran: list[int] = []
        lock = threading.Lock()

        def job(i: int) -> int:
            with lock:
                ran.append(i)
            if i % 97 == 0:
                time.sleep(0.002)  # a few block for a while, the rest return at once
            if i % 13 == 0:
                raise ValueError(i)
            return i * 2

        futures: dict[int, asyncio.Future[object]] = {}
        i = 0
        for _ in range(300):  # bursts of 1..16 submits, with the loop yielding in between
            for _ in range(random.randint(1, 16)):
                futures[i] = pool.submit(lambda i=i: job(i))
                i += 1
            await asyncio.sleep(0 if random.random() < 0.7 else 0.001)
        _, pending = await asyncio.wait(futures.values(), timeout=30)
        assert not pending, f"{len(pending)} items never ran"
        for n, future in futures.items():
            if n % 13 == 0:
                with pytest.raises(ValueError):
                    future.result()
            else:
                assert future.result() == n * 2
        assert sorted(ran) == list(range(i))  # each exactly once
        pool.shutdown()

    asyncio.run(main())


def test_blocking_items_each_get_a_thread_and_shutdown_ends_them() -> None:
    def ours() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("blocking-test-")]

    async def main() -> None:
        pool = _Threads(asyncio.get_running_loop(), 8, "blocking-test")
        started = time.monotonic()
        await asyncio.gather(*(pool.submit(lambda: time.sleep(0.3)) for _ in range(8)))
        assert time.monotonic() - started < 1.2  # side by side: 8 x 0.3 s would take 2.4 s in a row
        assert len(ours()) == 8
        pool.shutdown()

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while ours() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not ours()


def _run(scenario: Callable[[_Threads], Any], size: int = 4) -> Any:
    async def main() -> Any:
        threads = _Threads(asyncio.get_running_loop(), size, "test")
        try:
            return await scenario(threads)
        finally:
            threads.shutdown()

    return asyncio.run(main())


def test_an_item_behind_a_blocking_handler_gets_a_thread_of_its_own() -> None:
    # One thread is awake when both are handed over, so it takes the blocking one first: the other
    # must not wait for it.
    release = threading.Event()

    async def scenario(threads: _Threads) -> tuple[str, str]:
        await threads.submit(lambda: None)  # a thread that exists: woken, not started (which waits)
        blocked = threads.submit(lambda: release.wait(10) and threading.current_thread().name)
        quick = threads.submit(lambda: threading.current_thread().name)
        try:
            quick_thread = await asyncio.wait_for(quick, 5)  # long before the blocking one returns
            assert not blocked.done()
        finally:
            release.set()
        return quick_thread, await blocked

    quick_thread, blocked_thread = _run(scenario)
    assert quick_thread != blocked_thread


def test_an_outcome_left_for_the_end_of_a_burst_comes_back_while_the_burst_blocks() -> None:
    # One thread for both: it runs the quick item, then takes the blocking one. The quick outcome
    # must reach the loop meanwhile.
    release = threading.Event()

    async def scenario(threads: _Threads) -> float:
        await threads.submit(lambda: None)
        started = time.monotonic()
        quick = threads.submit(lambda: "quick")
        blocked = threads.submit(lambda: release.wait(10))
        try:
            assert await asyncio.wait_for(quick, 5) == "quick"
            waited = time.monotonic() - started
            assert not blocked.done()
        finally:
            release.set()
        assert await blocked is True
        return waited

    assert _run(scenario, size=1) < 5


def test_at_most_size_threads_run_at_once() -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1

    async def scenario(threads: _Threads) -> None:
        # Never more items at once than the pool's size, as the worker's slots guarantee.
        for _ in range(5):
            await asyncio.gather(*(threads.submit(work) for _ in range(3)))

    _run(scenario, size=3)
    assert peak == 3
