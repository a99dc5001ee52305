"""Fixtures and helpers of the worker tests: a side-effect table, polling with deadlines, in-process
workers driven by asyncio, and subprocess workers (tests/worker/runner.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

import pgq
from pgq import _sql

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "runner.py"

# A worker's LISTEN backend (a WHERE condition on pg_stat_activity). Its last statement is the LISTEN,
# or the liveness ping it sends after io_timeout (5 s or more) without notifications (sql/ping.sql).
LISTENER = ("datname = current_database() AND pid <> pg_backend_pid() "
            "AND (query LIKE '%%LISTEN pgq%%' OR query LIKE '-- ping:%%')")

EFFECTS_DDL = """
CREATE TABLE effects (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    kind text NOT NULL,
    n integer,
    attempt integer,
    token uuid,
    pid integer,
    note text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


class DB:
    """An autocommit connection to the test database, for setup and for checking outcomes."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)

    def rows(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        """Run `query` and return its rows (empty for statements without results)."""
        cur = self.conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    def value(self, query: str, params: Any = None) -> Any:
        """The first column of the first row."""
        row = self.rows(query, params)[0]
        return next(iter(row.values()))

    def status_counts(self, kind: str | None = None) -> dict[str, int]:
        """{status: number of jobs} (of `kind`, or all)."""
        rows = self.rows("SELECT status::text AS s, count(*) AS c FROM pgq.jobs "
                         "WHERE %(k)s::text IS NULL OR kind = %(k)s GROUP BY 1", {"k": kind})
        return {r["s"]: r["c"] for r in rows}

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


BIG = 60_000  # characters of each big job's payload: 300 of them outgrow any socket buffers (about 18 MB)


class FrozenClient:
    """A client that sends one statement and never reads its result, like a worker process frozen
    (SIGSTOP, a suspended VM) right after sending it: once the result outgrows the socket buffers,
    its backend blocks writing (wait event ClientWrite) before it could commit."""

    def __init__(self, dsn: str, query: str, params: dict[str, Any] | None = None) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self.conn.pgconn.backend_pid
        text = psycopg.ClientCursor(self.conn).mogrify(query, params)  # the text pgq sends, comment first
        self.conn.pgconn.send_query(text.encode())
        while self.conn.pgconn.flush():
            time.sleep(0.001)

    def wait_event(self, db: DB) -> str | None:
        """The backend's wait event ('' for none); None once the session is gone."""
        rows = db.rows("SELECT coalesce(wait_event, '') AS e FROM pg_stat_activity WHERE pid = %s", (self.pid,))
        return rows[0]["e"] if rows else None

    def close(self) -> None:
        """Drop the connection (which also ends the stuck statement, rolling it back)."""
        self.conn.close()


def freeze_mid_claim(dsn: str, db: DB, jobs: int, queue: str = "default", claim_dsn: str | None = None) -> FrozenClient:
    """Enqueue `jobs` big jobs of kind "big" in `queue` and have a frozen client (connected to
    `claim_dsn`, default `dsn`) claim them all: returns once its backend is stuck writing the claim's
    result, the jobs locked but not claimed."""
    with pgq.Queue(dsn) as producer:
        producer.enqueue_many([pgq.JobSpec("big", {"blob": "x" * BIG, "n": n}, queue=queue) for n in range(jobs)])
    frozen = FrozenClient(claim_dsn or dsn, _sql.query("job_claim_fast"), {
        "queue": queue, "kinds": None, "limit": jobs, "lease_s": 60.0, "worker": "frozen"})
    wait_for(lambda: frozen.wait_event(db) == "ClientWrite", 10, "the frozen client's claim to block writing")
    return frozen


@pytest.fixture
def db(pgq_dsn: str) -> Iterator[DB]:
    """The test database, with the `effects` table the test app's handlers write to."""
    database = DB(pgq_dsn)
    database.rows(EFFECTS_DDL)
    try:
        yield database
    finally:
        database.close()


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll `condition()` until it returns something truthy (returned) or `timeout` passes (fail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last value: {value!r})")
        time.sleep(interval)


async def async_wait_for(condition: Callable[[], Awaitable[Any]], timeout: float, what: str,
                         interval: float = 0.02) -> Any:
    """`wait_for` for coroutines."""
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last value: {value!r})")
        await asyncio.sleep(interval)


async def run_worker_until(
    app: pgq.App,
    done: Callable[[pgq.AsyncQueue], Awaitable[Any]],
    *,
    timeout: float = 15.0,
    before: Callable[[pgq.AsyncQueue], Awaitable[None]] | None = None,
    **settings: Any,
) -> pgq.Worker:
    """Run a worker of `app` in this loop until `done(queue)` is truthy, then stop it (drain) and
    return it. `before(queue)` runs once the worker task has started. Fails on timeout."""
    settings.setdefault("lease", 5.0)
    settings.setdefault("poll_interval", 0.5)
    worker = pgq.Worker(app, **settings)
    runner = asyncio.create_task(worker.run_async())
    try:
        async with pgq.AsyncQueue(app.dsn) as queue:
            if before is not None:
                await before(queue)

            async def check() -> Any:
                if runner.done():
                    runner.result()  # raises what the worker raised
                    pytest.fail("the worker stopped on its own")
                return await done(queue)

            await async_wait_for(check, timeout, "the worker to get the job done")
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 20)
    return worker


def _sigint_default() -> None:
    """In the child before it runs: SIGINT back to its default. A suite started from a shell that
    ignores SIGINT (a background job: `cmd &`, nohup) hands the ignore down, and a worker rightly
    leaves an ignored SIGINT alone; the tests start workers as a terminal would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class WorkerProcess:
    """A worker in a child process (tests/worker/runner.py), its output in a log file."""

    def __init__(self, dsn: str, log_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        child_env = dict(os.environ, PGQ_TEST_WORKER_DSN=dsn, PYTHONUNBUFFERED="1")
        child_env.update(env or {})
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in wait()/kill()
        self.proc = subprocess.Popen([sys.executable, str(RUNNER), *args], env=child_env,
                                     stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_sigint_default)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the child still runs."""
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Send `sig` to the child."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for the child to exit; return its exit status (fail on timeout, showing its log)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.pid} did not exit within {timeout} s; its log:\n{self.log()}")
        finally:
            if not self._log.closed:
                self._log.flush()

    def log(self) -> str:
        """Everything the child wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the child if it still runs, and reap it."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


@pytest.fixture
def spawn_worker(pgq_dsn: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start subprocess workers on the test database: `spawn_worker("--concurrency", "4", env={...})`.
    Every worker still running at the end of the test is killed; logs of failed tests are printed."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(pgq_dsn, tmp_path / f"worker-{len(started)}.log", *args, env=env)
        started.append(worker)
        return worker

    try:
        yield spawn
    finally:
        for worker in started:  # all of them first: nothing below may leave one running
            with contextlib.suppress(Exception):
                worker.kill()
        for worker in started:
            print(f"--- log of worker {worker.pid} ---\n{worker.log()[-6000:]}")


@pytest.fixture
def faults(pgq_dsn: str, db: DB, spawn_worker: Callable[..., WorkerProcess]) -> Iterator[Any]:
    """A fault proxy in front of the test server, and the history triggers on the test database
    (a `tests.worker.faults.Faults`)."""
    from .. import history
    from ..faultproxy import FaultProxy
    from .faults import Faults

    params = conninfo_to_dict(pgq_dsn)
    host = str(params.get("host") or "127.0.0.1")
    port = int(params.get("port") or 5432)
    if host.startswith("/"):
        # A unix-socket DSN: the server may listen on 127.0.0.1 at the same port too (the embedded
        # test server does, see pgq.embedded), which the proxy can forward to.
        host = "127.0.0.1"
        try:
            socket.create_connection((host, port), timeout=5).close()
        except OSError:
            pytest.skip("the fault proxy needs a TCP server; the test server is on a unix socket only")
    history.install(db.conn)
    proxy = FaultProxy(host, port)
    try:
        yield Faults(proxy, db, pgq_dsn, str(params["dbname"]), spawn_worker)
    finally:
        proxy.close()
