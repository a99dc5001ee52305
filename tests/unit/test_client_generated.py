"""The blocking client is generated from the asyncio one: the generated file must be current, and the
generator's rules must do what its docstring says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pgq

GENERATE = Path(pgq.__file__).resolve().parent / "client" / "generate.py"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("pgq_client_generate", GENERATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_sync_client_is_current() -> None:
    generate = _generator()
    assert generate.TARGET.read_text() == generate.render(generate.SOURCE.read_text()), (
        "pgq/client/queue.py is stale: run python3 pgq/client/generate.py")


def test_the_generator_rules() -> None:
    source = '''"""docstring of the source"""
import asyncio  # async-only
from psycopg_pool import AsyncConnectionPool


class AsyncQueue:
    """Say `AsyncQueue` and `async with` in backquotes: kept."""

    async def open(self) -> None:  # async-only
        await self._pool.open()

    async def close(self) -> None:
        idle = self._lock.acquire(blocking=False)  # sync: idle = self._lock.acquire()
        await asyncio.to_thread(self._waiters.close)
        async with self._pool.connection() as conn:
            await _ops.run_async(conn, op)
'''
    out = _generator().render(source)
    body = out.split('"""', 2)[2]
    assert "import asyncio" not in body and "from psycopg_pool import ConnectionPool" in body
    assert "class Queue:" in body and "Say `AsyncQueue` and `async with` in backquotes" in body
    assert "def open" not in body and "await" not in body.replace("`async with`", "")
    assert "idle = self._lock.acquire()\n" in body
    assert "self._waiters.close()" in body
    assert "with self._pool.connection() as conn:" in body and "_ops.run_sync(conn, op)" in body
