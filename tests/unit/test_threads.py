"""The worker's thread pool for sync handlers (pgq.worker._Threads): no item is ever stranded,
outcomes reach their futures, blocking handlers run side by side, and shutdown ends every thread."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from pgq.worker import _Threads


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
