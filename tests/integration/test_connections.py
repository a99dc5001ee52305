"""The connection a queue keeps out of its own pool for back-to-back calls (client.SPARE_MAX_AGE)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgq import AsyncQueue, JobStatus, Queue
from pgq.errors import InvalidState, PgqError

from ..worker.conftest import wait_for


def _kill_other_backends(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_sequential_calls_share_one_connection_and_concurrent_ones_use_the_pool(pgq_dsn: str) -> None:
    with Queue(pgq_dsn, min_size=1, max_size=4) as q:
        ids = [q.enqueue("k", {"i": i}) for i in range(50)]
        assert q.pool.get_stats().get("requests_num", 0) == 1  # one getconn: the kept connection
        errors: list[BaseException] = []
        got: list[int] = []

        def enqueue_some() -> None:
            try:
                got.extend(q.enqueue("k", {"t": True}) for _ in range(25))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=enqueue_some) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(set(got)) == 150 and not set(got) & set(ids)
        assert q.pool.get_stats().get("requests_num", 0) > 1  # the busy kept connection sent others to the pool
        assert len(q.list(status="queued", limit=1000)) == 200


def test_async_sequential_calls_share_one_connection_and_concurrent_ones_use_the_pool(pgq_dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=3) as q:
            for i in range(50):
                await q.enqueue("k", {"i": i})
            assert q.pool.get_stats().get("requests_num", 0) == 1
            ids = await asyncio.gather(*(q.enqueue("k", {"c": i}) for i in range(100)))
            assert len(set(ids)) == 100
            assert q.pool.get_stats().get("requests_num", 0) > 1
            assert len(await q.list(status="queued", limit=1000)) == 150

    asyncio.run(main())


def test_a_pool_of_one_connection_is_never_kept_from_its_other_users(pgq_dsn: str) -> None:
    with Queue(pgq_dsn, min_size=1, max_size=1, timeout=2) as q:
        job_id = q.enqueue("k")
        with q.pool.connection() as conn:  # would time out if the queue held the only connection
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert q.get(job_id) is not None


def test_a_killed_kept_connection_is_replaced(pgq_dsn: str) -> None:
    with Queue(pgq_dsn, min_size=1, max_size=3) as q:
        job_id = q.enqueue("k")
        assert _kill_other_backends(pgq_dsn) >= 1
        job = q.get(job_id)  # retry-safe: the dead connection goes back to the pool, the read is retried
        assert job is not None and job.id == job_id
        killed = _kill_other_backends(pgq_dsn)
        with pytest.raises(psycopg.OperationalError):
            q.claim(worker="w", limit=1)  # not retry-safe: raised, never re-run blindly
        # Each dead connection fails at most one call (as without a kept connection: the pool does
        # not check connections before handing them out), then a new one serves.
        failures = 1
        while True:
            try:
                [claim] = q.claim(worker="w", limit=1)
                break
            except psycopg.OperationalError:
                failures += 1
                assert failures <= killed
        assert q.complete(claim) is JobStatus.SUCCEEDED


def test_async_a_killed_kept_connection_is_replaced(pgq_dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=3) as q:
            job_id = await q.enqueue("k")
            assert _kill_other_backends(pgq_dsn) >= 1
            job = await q.get(job_id)
            assert job is not None and job.id == job_id
            killed = _kill_other_backends(pgq_dsn)
            with pytest.raises(psycopg.OperationalError):
                await q.claim(worker="w", limit=1)
            failures = 1
            while True:
                try:
                    [claim] = await q.claim(worker="w", limit=1)
                    break
                except psycopg.OperationalError:
                    failures += 1
                    assert failures <= killed
            assert await q.complete(claim) is JobStatus.SUCCEEDED

    asyncio.run(main())


def test_async_a_call_cancelled_mid_statement_leaves_the_queue_usable(pgq_dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=3) as q:
            job_id = await q.enqueue("k")
            other_id = await q.enqueue("k")
            locker: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(pgq_dsn)
            try:
                await locker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (job_id,))
                blocked = asyncio.ensure_future(q.cancel(job_id))  # waits for the row lock, on the kept connection
                await asyncio.sleep(0.3)
                assert not blocked.done()
                blocked.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await blocked
            finally:
                await locker.rollback()
                await locker.close()
            # The next calls run on a clean connection and see the job untouched.
            job = await q.get(job_id)
            assert job is not None and job.status is JobStatus.QUEUED
            assert (await q.cancel(other_id)).status is JobStatus.CANCELLED
            for _ in range(5):
                await q.enqueue("k")
            assert len(await q.list(status="queued")) == 6

    asyncio.run(main())


def test_closing_returns_the_kept_connection(pgq_dsn: str) -> None:
    async def main() -> None:
        q = AsyncQueue(pgq_dsn, min_size=1, max_size=3)
        await q.open()
        await q.enqueue("k")
        await q.close()
        assert q.pool.closed
        with pytest.raises(Exception, match="closed"):
            await q.enqueue("k")

    asyncio.run(main())
    q = Queue(pgq_dsn, min_size=1, max_size=3)
    q.enqueue("k")
    q.close()
    with pytest.raises(Exception, match="closed"):
        q.enqueue("k")
    # Every connection of both queues is closed. A backend leaves pg_stat_activity a moment after its
    # client hung up (the server sees the close asynchronously), so wait for that, within a bound a
    # leaked connection never meets.
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        def others() -> int:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchone()
            assert row is not None
            return int(row[0])

        wait_for(lambda: others() == 0, 10, "the closed queues' backends to exit")


def test_own_pools_carry_the_jsonb_loader_and_a_callers_pool_is_left_as_it_was(pgq_dsn: str) -> None:
    # pgq installs its jsonb loader on the connections of the pools it creates (so its statements skip
    # the per-cursor set-up), never on a caller's: theirs decode jsonb as they configured them. Claims
    # decode payloads the same either way.
    from psycopg_pool import ConnectionPool

    from pgq._ops.driver import _JSONB_OID, _JsonbBinaryLoader

    def loader(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> Any:
        return conn.adapters.get_loader(_JSONB_OID, psycopg.pq.Format.BINARY)

    with Queue(pgq_dsn, min_size=1, max_size=2) as q:
        q.enqueue("k", {"a": [1, 2.5, None]}, queue="loaders")
        with q.pool.connection() as conn:
            assert loader(conn) is _JsonbBinaryLoader
        [claim] = q.claim(worker="w", queues=["loaders"])
        assert claim.job.payload == {"a": [1, 2.5, None]}
    with ConnectionPool(pgq_dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool, Queue(pool) as q:
        q.enqueue("k", {"b": "x"}, queue="loaders")
        [claim] = q.claim(worker="w", queues=["loaders"])
        assert claim.job.payload == {"b": "x"}
        with pool.connection() as conn:
            assert loader(conn) is not _JsonbBinaryLoader
            assert conn.execute("SELECT '{\"c\": 1}'::jsonb", binary=True).fetchone() == ({"c": 1},)

    async def main() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=2) as aq:
            await aq.enqueue("k", {"d": 4}, queue="loaders")
            async with aq.pool.connection() as conn:
                assert loader(conn) is _JsonbBinaryLoader
            [claim] = await aq.claim(worker="w", queues=["loaders"])
            assert claim.job.payload == {"d": 4}

    asyncio.run(main())


def test_own_connections_read_datetimes_in_utc_whatever_the_session_zone(pgq_dsn: str) -> None:
    """pgq's own pools set the session's zone to UTC (sql/session_utc.sql): the datetimes they read
    carry datetime.timezone.utc, the instants unchanged. A caller's connection keeps its own zone."""
    rome = make_conninfo(pgq_dsn, options="-c TimeZone=Europe/Rome")
    with psycopg.connect(rome, autocommit=True) as mine:
        with Queue(rome) as q:
            job_id = q.enqueue("k", {"i": 1})
            [claim] = q.claim(worker="w", limit=1)
            row = mine.execute("SELECT created_at, started_at FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
            assert row is not None
            created, started = row
            assert str(created.tzinfo) == "Europe/Rome"  # the caller's connection: its own zone
            job = claim.job
            assert job.created_at.tzinfo is dt.UTC and job.started_at is not None
            assert job.started_at.tzinfo is dt.UTC and job.run_at.tzinfo is dt.UTC
            assert (job.created_at, job.started_at) == (created, started)  # the same instants
            got = q.get(job_id)
            assert got is not None and got.lease_expires_at is not None
            assert got.lease_expires_at.tzinfo is dt.UTC
            # On the caller's connection, pgq changes nothing: its session keeps its zone.
            q.enqueue("k", {"i": 2}, conn=mine)
            assert mine.execute("SHOW TimeZone").fetchone() == ("Europe/Rome",)

        async def via_async() -> dt.datetime:
            async with AsyncQueue(rome) as aq:
                [aclaim] = await aq.claim(worker="w", limit=1)
                return aclaim.job.created_at

        created_async = asyncio.run(via_async())
        assert created_async.tzinfo is dt.UTC


def test_the_kept_connection_keeps_its_cursor_while_its_results_stay_small(pgq_dsn: str) -> None:
    """Back-to-back calls run on one cursor of the kept connection (its loaders and dumpers found
    once); a call whose result has more rows than KEPT_CURSOR_MAX_ROWS closes it, so that no big
    result stays in memory until the next call, and the next call opens a new one."""
    from pgq._ops import KEPT_CURSOR_MAX_ROWS

    with Queue(pgq_dsn, min_size=1, max_size=2) as q:
        first = q.enqueue("k", {"i": 0})
        cursor = q._spare_cursor
        assert cursor is not None and not cursor.closed
        for i in range(1, 10):
            q.enqueue("k", {"i": i})
        [claim] = q.claim(worker="w", limit=1)
        assert q.complete(claim) is JobStatus.SUCCEEDED and claim.id == first
        assert q._spare_cursor is cursor  # enqueues, a claim and an acknowledgement on the same cursor
        held = q.enqueue("k", dedupe_key="d")
        q.cancel(held)
        q.enqueue("k", dedupe_key="d")
        with pytest.raises(InvalidState):
            q.retry(held)  # a unique violation raised by the server on that cursor leaves it usable
        assert q._spare_cursor is cursor
        assert len(q.list(status="queued")) == 10 > KEPT_CURSOR_MAX_ROWS
        assert q._spare_cursor is None and cursor.closed  # the big result went with its cursor
        job = q.get(first)
        assert job is not None and job.status is JobStatus.SUCCEEDED
        assert q._spare_cursor is not None and q._spare_cursor is not cursor

    async def main() -> None:
        async with AsyncQueue(pgq_dsn, min_size=1, max_size=2) as aq:
            await aq.enqueue("k", {"a": 1})
            acursor = aq._spare_cursor
            assert acursor is not None and not acursor.closed
            for _ in range(3):
                await aq.enqueue("k", {"a": 2})
            assert aq._spare_cursor is acursor
            assert len(await aq.list(status="queued")) == 14
            assert aq._spare_cursor is None and acursor.closed
            await aq.enqueue("k", {"a": 3})
            assert aq._spare_cursor is not None and not aq._spare_cursor.closed

    asyncio.run(main())


def test_keep_connection_with_a_callers_pool_keeps_one_and_gives_it_back_on_close(pgq_dsn: str) -> None:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    with ConnectionPool(pgq_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}) as pool:
        pool.wait()  # both connections open: the pool fills in the background (CI once saw 0 available)
        q = Queue(pool, keep_connection=True)
        ids = [q.enqueue("k", {"i": i}) for i in range(20)]
        assert pool.get_stats().get("requests_num", 0) == 1  # one getconn for twenty calls
        assert pool.get_stats()["pool_available"] == 1  # the kept one is out of the pool
        q.close()
        assert not pool.closed and pool.get_stats()["pool_available"] == 2  # given back, pool left open
        assert len(q.list(status="queued", limit=100)) == 20  # still usable: through the pool
        assert sorted(j.id for j in q.list(status="queued", limit=100)) == ids
    with ConnectionPool(pgq_dsn, min_size=1, max_size=2) as pool, pytest.raises(PgqError, match="autocommit"):
        Queue(pool, keep_connection=True)  # its connections would leave each call's transaction open

    async def main() -> None:
        async with AsyncConnectionPool(pgq_dsn, min_size=2, max_size=2, kwargs={"autocommit": True}) as apool:
            await apool.wait()
            aq = AsyncQueue(apool, keep_connection=True)
            for i in range(20):
                await aq.enqueue("k", {"i": i})
            assert apool.get_stats().get("requests_num", 0) == 1
            await aq.close()
            assert not apool.closed and apool.get_stats()["pool_available"] == 2
            assert len(await aq.list(status="queued", limit=100)) == 40

    asyncio.run(main())


def test_keep_connection_false_takes_a_pool_connection_for_every_call(pgq_dsn: str) -> None:
    with Queue(pgq_dsn, min_size=1, max_size=3, keep_connection=False) as q:
        for i in range(10):
            q.enqueue("k", {"i": i})
        assert q.pool.get_stats().get("requests_num", 0) == 10
        assert q._spare is None
