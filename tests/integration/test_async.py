"""AsyncQueue runs the same operations as Queue (shared implementation); check the async driver."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
import pytest

from pgq import AsyncQueue, InvalidState, JobSpec, JobStatus, LeaseLost, NotFound

Factory = Callable[[], AbstractAsyncContextManager[AsyncQueue]]


def test_async_full_lifecycle(pgq_async_queue: Factory) -> None:
    async def main() -> None:
        async with pgq_async_queue() as q:
            ids = await q.enqueue_many([JobSpec("k", {"i": i}) for i in range(5)])
            assert await q.enqueue("k", dedupe_key="d") == await q.enqueue("k", dedupe_key="d")
            claims = await q.claim(worker="aw", limit=3, lease=30)
            assert [c.id for c in claims] == ids[:3]
            assert await q.complete(claims[0], {"ok": 1}) is JobStatus.SUCCEEDED
            with pytest.raises(LeaseLost):
                await q.complete(claims[0])
            assert (await q.fail(claims[1], "e", retry_in=0)).status is JobStatus.QUEUED
            assert (await q.snooze(claims[2], 60)).attempts == 0
            await q.heartbeat([])
            again = await q.claim(worker="aw", limit=10)
            await q.heartbeat(again)
            assert await q.complete_many([(c, None) for c in again[:1]]) == {again[0].id: JobStatus.SUCCEEDED}
            assert set(await q.fail_many([(c, "x") for c in again[1:2]])) == {again[1].id}
            assert set(await q.release(again[2:])) == {c.id for c in again[2:]}
            assert await q.rescue_expired() == []
            job = await q.get(ids[0])
            assert job is not None and job.result == {"ok": 1}
            assert len(await q.list(status="succeeded")) == 2
            cancelled = await q.cancel(ids[4])
            assert cancelled.status is JobStatus.CANCELLED
            assert (await q.retry(ids[4])).status is JobStatus.QUEUED
            with pytest.raises(NotFound):
                await q.cancel(10**12)
            await q.cancel(ids[4])
            with pytest.raises(InvalidState):
                await q.cancel(ids[4])
            await q.set_concurrency_limit("k", 2)
            await q.set_concurrency_limit("k", None)
            assert await q.is_dirty("default", "d")
            assert {r["queue"] for r in await q.stats()} == {"default"}
            assert await q.purge(3600) == 0

    asyncio.run(main())


def test_async_enqueue_in_callers_transaction(pgq_async_queue: Factory, pgq_dsn: str) -> None:
    async def main() -> None:
        async with pgq_async_queue() as q:
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(pgq_dsn)
            try:
                kept = await q.enqueue("k", conn=conn)
                await conn.commit()
                dropped = await q.enqueue("k", conn=conn)
                await conn.rollback()
            finally:
                await conn.close()
            assert await q.get(kept) is not None
            assert await q.get(dropped) is None

    asyncio.run(main())


def test_async_queue_on_a_callers_pool_leaves_it_open(pgq_dsn: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def main() -> None:
        async with AsyncConnectionPool(pgq_dsn, kwargs={"autocommit": True}) as pool:
            async with AsyncQueue(pool) as q:
                await q.enqueue("k")
            assert not pool.closed
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM pgq.jobs")
                assert await cur.fetchone() == (1,)

    asyncio.run(main())


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit-pool", "transaction-pool"])
def test_queues_on_a_callers_pool_commit_their_work_whatever_its_autocommit(pgq_dsn: str, autocommit: bool) -> None:
    """A caller's pool may hand out connections outside autocommit: every operation must still be
    committed when it returns, and a failed one must leave the connection clean for the next."""
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from pgq import NotFound, Queue

    def committed() -> int:
        with psycopg.connect(pgq_dsn) as other:
            row = other.execute("SELECT count(*) FROM pgq.jobs WHERE status = 'succeeded'").fetchone()
            return 0 if row is None else int(row[0])

    with ConnectionPool(pgq_dsn, min_size=1, max_size=1, kwargs={"autocommit": autocommit}) as pool:
        q = Queue(pool)
        q.enqueue("k")
        with pytest.raises(NotFound):
            q.cancel(10**9)
        [claim] = q.claim(worker="w", limit=1)
        q.complete(claim)
        assert committed() == 1

    async def main() -> None:
        async with AsyncConnectionPool(pgq_dsn, min_size=1, max_size=1, kwargs={"autocommit": autocommit}) as apool:
            aq = AsyncQueue(apool)
            await aq.enqueue("k")
            with pytest.raises(NotFound):
                await aq.cancel(10**9)
            [aclaim] = await aq.claim(worker="w", limit=1)
            await aq.complete(aclaim)

    asyncio.run(main())
    assert committed() == 2
