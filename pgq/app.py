"""Tasks and the application that holds them.

`App` is the registry a worker serves: `@app.task` turns a plain `def` or an `async def` into a `Task`
(the handler of one job kind), `@app.periodic` adds a schedule to a task; `pgq.Worker(app, ...)` runs
them. Handlers receive the job's payload (a JSON object) as keyword arguments and:

- return a JSON value: the job succeeds, the value is stored as its result;
- raise: the attempt fails; the task's retry policy (`Backoff` by default) says when to try again,
  until the job runs out of attempts; raise `PermanentFailure` to fail at once without retries;
- return or raise a `Snooze(delay)`: the job is requeued `delay` from now without spending an attempt.
  `poll_later(deadline)` builds the common polling snooze (every 10 s for 2 minutes, then every 60 s)
  and fails the job as timed out once the deadline has passed.

Inside a handler, `current_job()` returns the job being run (its id, attempt, lease token, ...).

Enqueueing: `task.defer(**kwargs)` / `await task.defer_async(**kwargs)`; job options (dedupe key,
watermark, delay, run_at, priority, queue, max_attempts, the caller's connection) go through
`task.configure(...)`, so they never collide with the handler's own argument names.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import importlib
import inspect
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._ops import parse_rate
from .client import PGBOUNCER_KWARGS, AsyncQueue, Queue, check_pgbouncer_pool
from .cron import Cron, CronError, Every, Schedule
from .errors import InvalidJob, PgqError
from .models import JSON, Claim, Job, JobSpec, delay_seconds, encode_json

__all__ = [
    "DEFAULT_RETRY",
    "App",
    "Backoff",
    "CronError",
    "Deferral",
    "JobContext",
    "Periodic",
    "PermanentFailure",
    "PollingTimeout",
    "RetryPolicy",
    "Snooze",
    "Task",
    "cancel_requested",
    "current_job",
    "load_app",
    "poll_later",
    "polling_schedule",
    "set_progress",
]

Handler = Callable[..., Any]


# ---------------------------------------------------------------------------------------------
# Retry policies


class RetryPolicy(Protocol):
    """Decides when a failed attempt is tried again.

    `retry_in(attempt, error)` gets the number of the attempt that just failed (1 for the first) and
    the exception it raised; it returns the delay in seconds before the next attempt, or None to fail
    the job now. The job's `max_attempts` still applies: the last attempt fails the job whatever the
    policy answers. Called on the worker's event loop: it must be quick and must not block.
    """

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        """Seconds until the next attempt, or None for no retry."""
        ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: `initial * factor ** (attempt - 1)` seconds times a random
    factor in [1 - jitter, 1 + jitter), never over `max_delay` and never under `min_delay`.

    `Backoff()` (the default policy) waits about 2, 4, 8 ... seconds (at most an hour, never under 1 s).
    `Backoff(initial=5, factor=1, jitter=0)` is a fixed 5 s delay. Raises InvalidJob for negative or
    inconsistent values.
    """

    initial: float = 2.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.25
    min_delay: float = 1.0

    def __post_init__(self) -> None:
        for name in ("initial", "factor", "max_delay", "jitter", "min_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidJob(f"Backoff.{name} must be a number >= 0, got {value!r}")
        if self.factor < 1:
            raise InvalidJob(f"Backoff.factor must be >= 1, got {self.factor!r}")
        if self.jitter >= 1:
            raise InvalidJob(f"Backoff.jitter must be below 1, got {self.jitter!r}")
        if self.min_delay > self.max_delay:
            raise InvalidJob("Backoff.min_delay must not exceed max_delay")

    def retry_in(self, attempt: int, error: BaseException) -> float:
        """See `RetryPolicy.retry_in`; this policy always retries."""
        exponent = min(max(attempt - 1, 0), 64)  # 2 ** 64 is already far past any max_delay
        delay = min(self.initial * self.factor**exponent, self.max_delay)
        if self.jitter:
            delay = min(delay * (1 - self.jitter + random.random() * 2 * self.jitter), self.max_delay)
        return max(delay, self.min_delay)


DEFAULT_RETRY = Backoff()
"""The retry policy of tasks that name none: about 2, 4, 8 ... s, capped at an hour, never under 1 s."""


class PermanentFailure(Exception):
    """Raise from a handler to fail the job now, without retries (its message becomes the error)."""


class PollingTimeout(PermanentFailure):
    """Raised by `poll_later` when a polling job is past its deadline: the job fails as timed out."""


class Snooze(Exception):
    """Return or raise from a handler to requeue the job `delay` from now (a timedelta or seconds,
    >= 0) without spending an attempt. Raises InvalidJob for a negative or non-numeric delay."""

    def __init__(self, delay: dt.timedelta | float) -> None:
        seconds = delay_seconds(delay)
        if not seconds >= 0:
            raise InvalidJob(f"snooze delay must be >= 0, got {delay!r}")
        super().__init__(f"snooze for {seconds:g} s")
        self.delay = seconds


# ---------------------------------------------------------------------------------------------
# The job being run


class JobContext:
    """What a worker knows about the attempt it runs, and what the handler tells it back.

    `claim` and `claimed_at` (monotonic, when the claim came back) are fixed. `cancelled` is set by
    the worker when the attempt must stop (the job was cancelled, or its lease was lost);
    `progress` holds the latest progress the handler reported as (version, JSON text), None until it
    reports any, and `progress_sent` the version the database has; the worker's heartbeat sends the
    newer one. A handler reads them through `cancel_requested()` and writes through `set_progress()`.
    """

    __slots__ = ("cancelled", "claim", "claimed_at", "progress", "progress_sent")

    def __init__(self, claim: Claim, claimed_at: float) -> None:
        self.claim = claim
        self.claimed_at = claimed_at
        self.cancelled = False
        self.progress: tuple[int, str] | None = None
        self.progress_sent = 0

    def db_now(self) -> dt.datetime:
        """The database clock now, estimated without a round trip: the claim's `started_at` (set by
        the database) plus the time elapsed on this machine's monotonic clock since the claim."""
        started = self.claim.job.started_at
        assert started is not None, "a claimed job always has started_at"
        return started + dt.timedelta(seconds=time.monotonic() - self.claimed_at)

    def unsent_progress(self) -> str | None:
        """The progress (JSON text) reported since the last `mark_sent`, or None; call it from the
        worker's loop. Returns the text and remembers its version as the one being sent."""
        progress = self.progress  # one read: a handler's thread may replace it meanwhile
        if progress is None or progress[0] == self.progress_sent:
            return None
        self.progress_sent = progress[0]
        return progress[1]


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("pgq_current_job", default=None)


def current_job() -> Job:
    """The job the calling handler runs (as claimed: id, kind, payload, attempts, lease_token ...).

    Works in async handlers and in sync handlers (their thread gets the handler's context). Raises
    PgqError when called outside a handler run by a pgq worker.
    """
    return _context().claim.job


def cancel_requested() -> bool:
    """Whether the job the calling handler runs must stop: it was cancelled, or its worker lost its
    lease (another worker may run it now). False outside a handler.

    The cooperative contract of a plain `def` handler: a thread cannot be interrupted, so a long
    handler calls this between steps and returns (or raises) soon after it turns True; whatever it
    returns then is dropped (the job stays cancelled, or belongs to whoever holds the lease now),
    and its worker slot is free again once it returns. An `async def` handler needs nothing: it gets
    `asyncio.CancelledError` at its next `await` (it may catch it to clean up, then re-raise).
    """
    context = _current.get()
    return context is not None and context.cancelled


def set_progress(value: JSON) -> None:
    """Report how far the calling handler got: any JSON value (e.g. ``{"done": 40, "of": 100}``).

    Cheap: nothing is written now. The worker stores the latest value with its next heartbeat (every
    third of the lease) or with the attempt's outcome, whichever comes first; it is visible as
    `Job.progress`, in `pgq jobs show` and in the pgq.running_jobs view, and is kept across attempts,
    so a retried handler can read where the last attempt got to (`current_job().progress`, as claimed).
    Raises InvalidJob for a value that is not JSON or is larger than a payload may be, PgqError
    outside a handler.
    """
    context = _context()
    text = encode_json("progress", value, None)
    previous = context.progress
    context.progress = (1 if previous is None else previous[0] + 1, text)


def _context() -> JobContext:
    context = _current.get()
    if context is None:
        raise PgqError("no pgq job is running here (current_job() works inside task handlers only)")
    return context


def polling_schedule(
    elapsed: dt.timedelta | float,
    *,
    deadline: dt.timedelta | float,
    fast: float = 10.0,
    fast_for: float = 120.0,
    slow: float = 60.0,
) -> float | None:
    """Seconds until the next poll of a job that waits for something, or None once it is too late.

    `elapsed`: how long the job has been waiting (see `poll_later`). Every `fast` seconds during the
    first `fast_for` seconds, then every `slow` seconds; never past the deadline, so the last poll
    happens at the deadline. None when `elapsed` has reached `deadline`. Pure: no I/O, no clock.
    """
    waited = delay_seconds(elapsed)
    limit = delay_seconds(deadline)
    if not (fast > 0 and slow > 0 and fast_for >= 0):
        raise InvalidJob("polling intervals must be > 0 (and fast_for >= 0)")
    if waited >= limit:
        return None
    step = fast if waited < fast_for else slow
    return min(step, limit - waited)


def poll_later(
    deadline: dt.timedelta | float,
    *,
    fast: float = 10.0,
    fast_for: float = 120.0,
    slow: float = 60.0,
) -> Snooze:
    """Return the Snooze that polls again on the `polling_schedule`, for the current job.

    The waiting time is measured on the database clock from the job's `created_at` (snoozes do not
    reset it). Past the deadline, raises PollingTimeout ("timed out ..."), which fails the job
    without retries. Call it from a handler only (PgqError otherwise).
    """
    context = _context()
    job = context.claim.job
    waited = (context.db_now() - job.created_at).total_seconds()
    delay = polling_schedule(waited, deadline=deadline, fast=fast, fast_for=fast_for, slow=slow)
    if delay is None:
        raise PollingTimeout(
            f"timed out: job {job.id} ({job.kind}) still waiting after {waited:.0f} s, "
            f"past its deadline of {delay_seconds(deadline):g} s"
        )
    return Snooze(delay)


# ---------------------------------------------------------------------------------------------
# Tasks


@dataclass(frozen=True, slots=True)
class _Options:
    queue: str | None = None
    priority: int | None = None
    delay: dt.timedelta | float | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    watermark: int | None = None
    max_attempts: int | None = None


class Task:
    """A registered handler: the code behind one job kind, with its defaults.

    Attributes: `name` (the job kind), `func`, `queue`, `priority`, `max_attempts` (None: the
    database default, 25), `retry` (a RetryPolicy), `timeout` (seconds or None), `concurrency_limit`
    (None: unlimited; a worker sets it in the database when it starts), `rate_limit` ((max_starts,
    seconds) or None; set likewise), `is_async`. Calling the task
    calls the handler directly, without a queue.
    """

    def __init__(
        self,
        app: App,
        func: Handler,
        *,
        name: str,
        queue: str,
        priority: int,
        max_attempts: int | None,
        retry: RetryPolicy,
        timeout: float | None,
        concurrency_limit: int | None,
        rate_limit: tuple[int, float] | None = None,
    ) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.retry = retry
        self.timeout = timeout
        self.concurrency_limit = concurrency_limit
        self.rate_limit = rate_limit
        self.is_async = inspect.iscoroutinefunction(inspect.unwrap(func)) or inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        self._fitting: set[frozenset[str]] = set()
        # Validates queue, priority and max_attempts now, at import time, not at the first defer.
        JobSpec(name, {}, queue=queue, priority=priority, max_attempts=max_attempts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<pgq.Task {self.name!r} queue={self.queue!r}>"

    def check_arguments(self, payload: JSON) -> dict[str, Any]:
        """Return `payload` as the handler's keyword arguments.

        Raises InvalidJob naming the task and the problem when the payload is not a JSON object or
        does not fit the handler's signature (missing or unexpected argument).
        """
        if not isinstance(payload, dict):
            raise InvalidJob(
                f"task {self.name!r}: the payload must be a JSON object of keyword arguments, "
                f"got {type(payload).__name__}"
            )
        # Whether keyword arguments bind depends on their names only: remember the sets that did.
        names = frozenset(payload)
        if names in self._fitting:
            return payload
        try:
            self.signature.bind(**payload)
        except TypeError as exc:
            # inspect names one problem; a payload with a misspelt key has two (a missing argument
            # and an unexpected one), and the misspelling is the one worth showing.
            params = self.signature.parameters
            unexpected = [] if any(p.kind is p.VAR_KEYWORD for p in params.values()) else [
                repr(k) for k in payload if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
            extra = f" (unexpected: {', '.join(unexpected)})" if unexpected and "unexpected" not in str(exc) else ""
            raise InvalidJob(f"task {self.name!r}: bad arguments: {exc}{extra}") from None
        if len(self._fitting) < 64:
            self._fitting.add(names)
        return payload

    def configure(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: dt.timedelta | float | None = None,
        run_at: dt.datetime | None = None,
        dedupe_key: str | None = None,
        watermark: int | None = None,
        max_attempts: int | None = None,
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
    ) -> Deferral:
        """Job options for the next `defer`: `task.configure(delay=10).defer(x=1)`.

        Options left out take the task's defaults. `conn`: enqueue inside the caller's transaction
        (a psycopg Connection for `defer`, an AsyncConnection for `defer_async`); the job exists if
        and only if that transaction commits, and pgq never commits it. Dedupe and watermark rules:
        see `Queue.enqueue_many`. Nothing is validated or sent until `defer`.
        """
        options = _Options(queue, priority, delay, run_at, dedupe_key, watermark, max_attempts)
        return Deferral(self, options, conn)

    def spec(self, **kwargs: Any) -> JobSpec:
        """The JobSpec `defer(**kwargs)` would enqueue, for batches: `app.queue.enqueue_many(specs)`.

        Raises InvalidJob when the arguments do not fit the handler.
        """
        return self.configure().spec(**kwargs)

    def defer(self, **kwargs: Any) -> int:
        """Enqueue a job of this task with `kwargs` as its payload; return its id.

        Uses the App's synchronous queue (thread-safe). Raises InvalidJob (nothing written) when the
        arguments do not fit the handler or are not JSON-serializable.
        """
        return self.configure().defer(**kwargs)

    async def defer_async(self, **kwargs: Any) -> int:
        """`defer` for asyncio code: uses the App's AsyncQueue of the running event loop (inside a
        worker, the worker's own pool)."""
        return await self.configure().defer_async(**kwargs)


@dataclass(frozen=True, slots=True)
class Deferral:
    """A task with job options, ready to enqueue (see `Task.configure`)."""

    task: Task
    options: _Options
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None

    def spec(self, **kwargs: Any) -> JobSpec:
        """The JobSpec of a job with payload `kwargs` and these options; raises InvalidJob."""
        task, o = self.task, self.options
        task.check_arguments(kwargs)
        return JobSpec(
            task.name,
            kwargs,
            queue=task.queue if o.queue is None else o.queue,
            priority=task.priority if o.priority is None else o.priority,
            run_at=o.run_at,
            delay=o.delay,
            dedupe_key=o.dedupe_key,
            watermark=o.watermark,
            max_attempts=task.max_attempts if o.max_attempts is None else o.max_attempts,
        )

    def defer(self, **kwargs: Any) -> int:
        """Enqueue one job with payload `kwargs`; return its id. See `Task.defer` and `Task.configure`.

        Raises PgqError when the options carry an AsyncConnection.
        """
        spec = self.spec(**kwargs)
        if self.conn is not None and not isinstance(self.conn, psycopg.Connection):
            raise PgqError("defer() needs a psycopg.Connection as conn; use defer_async() with an AsyncConnection")
        return self.task.app.queue.enqueue_many([spec], conn=self.conn)[0]

    async def defer_async(self, **kwargs: Any) -> int:
        """Enqueue one job with payload `kwargs`; return its id. See `Task.defer_async`.

        Raises PgqError when the options carry a (sync) Connection.
        """
        spec = self.spec(**kwargs)
        if self.conn is not None and not isinstance(self.conn, psycopg.AsyncConnection):
            raise PgqError("defer_async() needs a psycopg.AsyncConnection as conn; use defer() with a Connection")
        queue = await self.task.app.async_queue()
        return (await queue.enqueue_many([spec], conn=self.conn))[0]


@dataclass(frozen=True, slots=True)
class Periodic:
    """A task enqueued on a schedule. Each tick is enqueued once, by the maintenance leader of the
    moment, as a job with dedupe key `periodic:<name>:<tick epoch seconds>` and payload `kwargs`.

    `catch_up`: how far back a leader looks for ticks that were due while no worker ran (leader
    handover, restarts). A process's first look enqueues only the latest tick of that window, so a
    long outage yields one catch-up run, not a flood. It must stay below the retention of finished
    jobs (the jobs of past ticks are what prevents enqueueing them twice).
    """

    task: Task
    schedule: Schedule
    name: str
    queue: str
    kwargs: Mapping[str, Any]
    catch_up: float

    def dedupe_key(self, tick: dt.datetime) -> str:
        """The dedupe key of the job of `tick`."""
        return f"periodic:{self.name}:{int(tick.timestamp())}"

    def spec(self, tick: dt.datetime) -> JobSpec:
        """The JobSpec of the job of `tick`."""
        task = self.task
        return JobSpec(task.name, dict(self.kwargs), queue=self.queue, priority=task.priority,
                       dedupe_key=self.dedupe_key(tick), max_attempts=task.max_attempts)


# ---------------------------------------------------------------------------------------------
# The application


class App:
    """A set of tasks and the database they use.

    `dsn_or_pool`: a libpq DSN, or a psycopg pool (`ConnectionPool` or `AsyncConnectionPool`, owned by
    the caller; its connections must be autocommit). `app.queue` (sync) and `await app.async_queue()`
    are created on first use from the DSN (or around the given pool); `close()` / `aclose()` close
    what the App created. Workers open their own pool from `app.dsn` (with the given pool's
    connection kwargs). Registering tasks is not thread-safe: do it at import time.

    `pgbouncer`: the DSN is a PgBouncer in transaction pooling mode. Every connection pgq opens for
    this App then prepares no statements, and its workers LISTEN only on a direct `listen_dsn`
    (polling without one). A pool given with it must have `kwargs={"prepare_threshold": None}`
    (PgqError otherwise).
    """

    def __init__(
        self, dsn_or_pool: str | ConnectionPool[Any] | AsyncConnectionPool[Any], *, pgbouncer: bool = False
    ) -> None:
        self._sync_pool: ConnectionPool[Any] | None = None
        self._async_pool: AsyncConnectionPool[Any] | None = None
        self._connect_kwargs: dict[str, Any] = {}
        conninfo: object
        if isinstance(dsn_or_pool, str):
            conninfo = dsn_or_pool
        elif isinstance(dsn_or_pool, ConnectionPool | AsyncConnectionPool):
            if isinstance(dsn_or_pool, ConnectionPool):
                self._sync_pool = dsn_or_pool
            else:
                self._async_pool = dsn_or_pool
            conninfo = dsn_or_pool.conninfo
            kwargs = dsn_or_pool.kwargs
            if kwargs is not None and not isinstance(kwargs, dict):
                raise PgqError("App needs a pool whose kwargs are a dict (workers connect with them), not a callable")
            self._connect_kwargs = dict(kwargs or {})
            if pgbouncer:
                check_pgbouncer_pool(dsn_or_pool)
        else:
            raise PgqError(f"App needs a DSN or a psycopg pool, got {type(dsn_or_pool).__name__}")
        if not isinstance(conninfo, str):
            raise PgqError("App needs a pool whose conninfo is a str (workers connect with it), not a callable")
        self._dsn = conninfo
        self._pgbouncer = bool(pgbouncer)
        if pgbouncer:
            self._connect_kwargs.update(PGBOUNCER_KWARGS)
        self._tasks: dict[str, Task] = {}
        self._periodic: dict[str, Periodic] = {}
        self._queue: Queue | None = None
        self._queue_lock = threading.Lock()
        self._async_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[AsyncQueue]] = (
            weakref.WeakKeyDictionary()
        )
        self._owned_async: set[AsyncQueue] = set()

    # -- configuration ---------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN of the database (the conninfo of the pool the App was given)."""
        return self._dsn

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """Extra psycopg connection arguments (those of the pool the App was given, else empty;
        with `pgbouncer`, `prepare_threshold=None` too)."""
        return dict(self._connect_kwargs)

    @property
    def pgbouncer(self) -> bool:
        """Whether `dsn` is a PgBouncer in transaction pooling mode (see the class docstring)."""
        return self._pgbouncer

    @property
    def tasks(self) -> Mapping[str, Task]:
        """The registered tasks by name (job kind); read-only view."""
        return dict(self._tasks)

    @property
    def periodic_tasks(self) -> Sequence[Periodic]:
        """The registered schedules."""
        return tuple(self._periodic.values())

    @overload
    def task(self, func: Handler, /) -> Task: ...

    @overload
    def task(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
        timeout: dt.timedelta | float | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | tuple[int, float] | None = None,
        priority: int = 0,
    ) -> Callable[[Handler], Task]: ...

    def task(
        self,
        func: Handler | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
        timeout: dt.timedelta | float | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | tuple[int, float] | None = None,
        priority: int = 0,
    ) -> Task | Callable[[Handler], Task]:
        """Register a handler (`def` or `async def`) as a task: `@app.task` or `@app.task(...)`.

        `name`: the job kind (default: the function's `__name__`); `queue`, `priority`,
        `max_attempts`: defaults of its jobs; `retry`: a RetryPolicy (default `DEFAULT_RETRY`);
        `timeout`: seconds (or timedelta) after which an attempt is cancelled (async) or abandoned
        (sync) and fails with a "timeout" error; `concurrency_limit`: at most this many jobs of the
        kind run at once across all workers; `rate_limit`: at most so many of its jobs start per
        window across all workers ("100/s", "5/min", "1000/h" or (max_starts, seconds)). A worker
        stores both limits in the database when it starts. Raises PgqError for a name already
        registered and InvalidJob for bad values.
        """

        def register(handler: Handler) -> Task:
            return self._register(handler, name=name, queue=queue, max_attempts=max_attempts, retry=retry,
                                  timeout=timeout, concurrency_limit=concurrency_limit, priority=priority,
                                  rate_limit=rate_limit)

        return register if func is None else register(func)

    def _register(
        self,
        func: Handler,
        *,
        name: str | None,
        queue: str,
        max_attempts: int | None,
        retry: RetryPolicy | None,
        timeout: dt.timedelta | float | None,
        concurrency_limit: int | None,
        priority: int,
        rate_limit: str | tuple[int, float] | None = None,
    ) -> Task:
        if not callable(func):
            raise PgqError(f"a task handler must be callable, got {type(func).__name__}")
        kind = getattr(func, "__name__", None) if name is None else name
        if not isinstance(kind, str) or not kind:
            raise InvalidJob("a task name must be a non-empty str")
        if kind in self._tasks:
            raise PgqError(f"a task named {kind!r} is already registered in this app")
        timeout_s = None if timeout is None else delay_seconds(timeout)
        if timeout_s is not None and not timeout_s > 0:
            raise InvalidJob(f"task {kind!r}: timeout must be positive, got {timeout!r}")
        if concurrency_limit is not None and (
            isinstance(concurrency_limit, bool) or not isinstance(concurrency_limit, int) or concurrency_limit < 1
        ):
            raise InvalidJob(f"task {kind!r}: concurrency_limit must be an int >= 1, got {concurrency_limit!r}")
        if retry is not None and not callable(getattr(retry, "retry_in", None)):
            raise InvalidJob(f"task {kind!r}: retry must have a retry_in(attempt, error) method")
        task = Task(self, func, name=kind, queue=queue, priority=priority, max_attempts=max_attempts,
                    retry=DEFAULT_RETRY if retry is None else retry, timeout=timeout_s,
                    concurrency_limit=concurrency_limit,
                    rate_limit=None if rate_limit is None else parse_rate(rate_limit))
        self._tasks[kind] = task
        return task

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: dt.timedelta | float | None = None,
        name: str | None = None,
        queue: str | None = None,
        kwargs: Mapping[str, Any] | None = None,
        tz: str = "UTC",
        catch_up: dt.timedelta | float = dt.timedelta(hours=1),
        priority: int = 0,
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
        timeout: dt.timedelta | float | None = None,
    ) -> Callable[[Handler | Task], Task]:
        """Run a task on a schedule: `@app.periodic(cron="*/5 * * * *")` or `@app.periodic(every=60)`.

        Decorates a plain function (registered as a task with `name`, `queue` and the task options
        given here) or an existing Task (whose options stay; `queue` only changes where the ticks
        go). Each tick is enqueued exactly once however many workers run: see `Periodic`. `cron` is
        read in time zone `tz`; `every` must be whole seconds >= 1 (ticks aligned on the Unix
        epoch). `kwargs` is the payload of every tick's job. Raises CronError or PgqError for a bad
        schedule or a schedule name used twice.
        """
        schedule: Schedule
        if cron is not None and every is None:
            schedule = Cron.parse(cron, tz)
        elif every is not None and cron is None:
            schedule = Every.of(every)
        else:
            raise PgqError("periodic() needs exactly one of cron= or every=")
        catch_up_s = delay_seconds(catch_up)
        if not catch_up_s >= 0:
            raise PgqError(f"catch_up must be >= 0, got {catch_up!r}")
        payload = dict(kwargs or {})

        def register(target: Handler | Task) -> Task:
            if isinstance(target, Task):
                task = target
                if task.app is not self:
                    raise PgqError(f"task {task.name!r} belongs to another App")
            else:
                task = self._register(target, name=name, queue=queue or "default", max_attempts=max_attempts,
                                      retry=retry, timeout=timeout, concurrency_limit=None, priority=priority)
            task.check_arguments(payload)
            schedule_name = name or task.name
            if schedule_name in self._periodic:
                raise PgqError(f"a periodic schedule named {schedule_name!r} is already registered")
            self._periodic[schedule_name] = Periodic(task, schedule, schedule_name, queue or task.queue,
                                                     payload, catch_up_s)
            return task

        return register

    # -- queues ----------------------------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The App's synchronous Queue (created on first use; thread-safe)."""
        with self._queue_lock:
            if self._queue is None:
                self._queue = Queue(self._sync_pool if self._sync_pool is not None else self._dsn,
                                    pgbouncer=self._pgbouncer)
            return self._queue

    async def async_queue(self) -> AsyncQueue:
        """The App's AsyncQueue for the running event loop, opened on first use.

        Inside a worker this is the worker's own queue and pool. With an AsyncConnectionPool given to
        the App, a queue around that pool (which must belong to this loop).
        """
        loop = asyncio.get_running_loop()
        future = self._async_queues.get(loop)
        if future is None:
            future = loop.create_future()
            self._async_queues[loop] = future
            try:
                if self._async_pool is not None:
                    queue = AsyncQueue(self._async_pool, pgbouncer=self._pgbouncer)
                else:
                    queue = AsyncQueue(self._dsn, pgbouncer=self._pgbouncer)
                    self._owned_async.add(queue)
                await queue.open()
            except BaseException as exc:
                del self._async_queues[loop]
                future.set_exception(exc)
                future.exception()  # retrieved: the caller gets it raised below
                raise
            future.set_result(queue)
        return await asyncio.shield(future)

    def _bind_async_queue(self, loop: asyncio.AbstractEventLoop, queue: AsyncQueue | None) -> None:
        """Make `queue` the App's AsyncQueue on `loop` (a worker lends its own); None unbinds."""
        if queue is None:
            self._async_queues.pop(loop, None)
            return
        future: asyncio.Future[AsyncQueue] = loop.create_future()
        future.set_result(queue)
        self._async_queues[loop] = future

    def close(self) -> None:
        """Close the synchronous queue if the App created it. Idempotent."""
        with self._queue_lock:
            queue, self._queue = self._queue, None
        if queue is not None:
            queue.close()

    async def aclose(self) -> None:
        """Close the synchronous queue and the App's AsyncQueue of the running loop, if it created them."""
        self.close()
        loop = asyncio.get_running_loop()
        future = self._async_queues.pop(loop, None)
        if future is not None and future.done() and not future.exception():
            queue = future.result()
            if queue in self._owned_async:
                self._owned_async.discard(queue)
                await queue.close()

    # -- loading ---------------------------------------------------------------------------------

    @staticmethod
    def import_from_string(spec: str) -> App:
        """Import and return the App named by `spec`: ``"package.module:attr"`` (attr may be dotted).

        Raises PgqError with a one-line message for a malformed spec, a module that cannot be
        imported (the import error's type and message included), a missing attribute, or an object
        that is not an App. The caller decides what is on sys.path.
        """
        module_name, sep, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
        if not sep or not module_name or not attr:
            raise PgqError(f"bad app {spec!r}: expected MODULE:APP, e.g. myproject.tasks:app")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
                raise PgqError(f"cannot import {module_name!r}: no module named {exc.name!r}") from None
            raise PgqError(f"importing {module_name!r} failed: ModuleNotFoundError: {exc}") from exc
        except Exception as exc:
            raise PgqError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
        target: Any = module
        for part in attr.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise PgqError(f"module {module_name!r} has no attribute {attr!r}") from None
        if not isinstance(target, App):
            raise PgqError(f"{spec!r} is a {type(target).__name__}, not a pgq App")
        return target


def load_app(spec: str) -> App:
    """Module-level alias of `App.import_from_string` (used by the `pgq worker` command)."""
    return App.import_from_string(spec)
