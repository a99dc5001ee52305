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

Enqueueing: `task.defer(**kwargs)` / `await task.defer_async(**kwargs)`, type-checked against the
handler's signature (`Task` is generic over it; positional arguments are stored under their
parameter names); job options (dedupe key, watermark, delay, run_at, priority, queue, max_attempts,
the caller's connection) go through `task.configure(...)`, so they never collide with the handler's
own argument names.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._ops import parse_rate
from .client import PGBOUNCER_KWARGS, AsyncQueue, Queue, check_pgbouncer_pool
from .cron import Cron, Every, Schedule
from .errors import InvalidJob, PgqError
from .models import delay_seconds
from .retries import DEFAULT_RETRY, RetryPolicy
from .tasks import AnyTask, FollowUp, Handler, Periodic, Task

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["App", "load_app"]



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
        self._tasks: dict[str, AnyTask] = {}
        self._periodic: dict[str, Periodic] = {}
        self._queue: Queue | None = None
        self._queue_lock = threading.Lock()
        self._async_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[AsyncQueue]] = (
            weakref.WeakKeyDictionary()
        )
        self._owned_async: set[AsyncQueue] = set()
        self._otel: Any = None  # a pgq.otel.Tracing once pgq.otel.instrument(app) ran; read by its queues and workers

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
    def tasks(self) -> Mapping[str, AnyTask]:
        """The registered tasks by name (job kind); read-only view."""
        return dict(self._tasks)

    @property
    def periodic_tasks(self) -> Sequence[Periodic]:
        """The registered schedules."""
        return tuple(self._periodic.values())

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

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
        on_success: FollowUp | None = None,
        on_failure: FollowUp | None = None,
        group_by: str | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: str | tuple[int, float] | None = None,
        sequence_by: str | None = None,
        sequence_on_failure: str = "hold",
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

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
        on_success: FollowUp | None = None,
        on_failure: FollowUp | None = None,
        group_by: str | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: str | tuple[int, float] | None = None,
        sequence_by: str | None = None,
        sequence_on_failure: str = "hold",
    ) -> AnyTask | Callable[[Handler], AnyTask]:
        """Register a handler (`def` or `async def`) as a task: `@app.task` or `@app.task(...)`.

        The Task is generic over the handler's parameters and return type, so a type checker checks
        `defer` and `defer_async` calls against the handler's signature (see `Task`).

        `name`: the job kind (default: the function's `__name__`); `queue`, `priority`,
        `max_attempts`: defaults of its jobs; `retry`: a RetryPolicy (default `DEFAULT_RETRY`);
        `timeout`: seconds (or timedelta) after which an attempt is cancelled (async) or abandoned
        (sync) and fails with a "timeout" error; `concurrency_limit`: at most this many jobs of the
        kind run at once across all workers; `rate_limit`: at most so many of its jobs start per
        window across all workers ("100/s", "5/min", "1000/h" or (max_starts, seconds)). A worker
        stores both limits in the database when it starts. `on_success`: a task (or job kind)
        enqueued in the transaction that completes a job of this task, with payload
        ``{"job_id": id, "result": result}``; `on_failure`: likewise when a job fails for good (its
        last attempt failed, or it failed permanently), with ``{"job_id": id, "error": summary}``
        (see `pgq.after_success` for follow-ups decided at run time). `group_by`: the payload field
        whose value (a str or an int) is a job's group key; `group_concurrency`: at most this many
        running jobs of the kind per group key; `group_rate_limit`: at most so many starts per window
        per group key (as `rate_limit`); a worker stores both in the database when it starts (see
        `Queue.set_group_limits`). `sequence_by`: the payload field whose value (a str or an int) is
        a job's sequence key: jobs with the same key in a queue run one at a time, in enqueue order;
        `sequence_on_failure`: "hold" (a job failing for good holds the rest of its sequence until
        it is retried or cancelled) or "continue". Raises PgqError for a name
        already registered and InvalidJob for bad values (a follow-up task that does not take
        those arguments included).
        """

        def register(handler: Handler) -> AnyTask:
            return self._register(handler, name=name, queue=queue, max_attempts=max_attempts, retry=retry,
                                  timeout=timeout, concurrency_limit=concurrency_limit, priority=priority,
                                  rate_limit=rate_limit, on_success=on_success, on_failure=on_failure,
                                  group_by=group_by, group_concurrency=group_concurrency,
                                  group_rate_limit=group_rate_limit, sequence_by=sequence_by,
                                  sequence_on_failure=sequence_on_failure)

        return register if func is None else register(func)

    def _register(
        self,
        func: Callable[P, R],
        *,
        name: str | None,
        queue: str,
        max_attempts: int | None,
        retry: RetryPolicy | None,
        timeout: dt.timedelta | float | None,
        concurrency_limit: int | None,
        priority: int,
        rate_limit: str | tuple[int, float] | None = None,
        on_success: FollowUp | None = None,
        on_failure: FollowUp | None = None,
        group_by: str | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: str | tuple[int, float] | None = None,
        sequence_by: str | None = None,
        sequence_on_failure: str = "hold",
    ) -> Task[P, R]:
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
        if group_concurrency is not None and (
            isinstance(group_concurrency, bool) or not isinstance(group_concurrency, int) or group_concurrency < 1
        ):
            raise InvalidJob(f"task {kind!r}: group_concurrency must be an int >= 1, got {group_concurrency!r}")
        if group_by is not None and (not isinstance(group_by, str) or not group_by):
            raise InvalidJob(f"task {kind!r}: group_by must be a non-empty str (a payload field)")
        if sequence_by is not None and (not isinstance(sequence_by, str) or not sequence_by):
            raise InvalidJob(f"task {kind!r}: sequence_by must be a non-empty str (a payload field)")
        if sequence_on_failure not in ("hold", "continue"):
            raise InvalidJob(f"task {kind!r}: sequence_on_failure must be 'hold' or 'continue', "
                             f"got {sequence_on_failure!r}")
        if retry is not None and not callable(getattr(retry, "retry_in", None)):
            raise InvalidJob(f"task {kind!r}: retry must have a retry_in(attempt, error) method")
        task = Task(self, func, name=kind, queue=queue, priority=priority, max_attempts=max_attempts,
                    retry=DEFAULT_RETRY if retry is None else retry, timeout=timeout_s,
                    concurrency_limit=concurrency_limit,
                    rate_limit=None if rate_limit is None else parse_rate(rate_limit),
                    on_success=on_success, on_failure=on_failure, group_by=group_by,
                    group_concurrency=group_concurrency,
                    group_rate_limit=None if group_rate_limit is None else parse_rate(group_rate_limit),
                    sequence_by=sequence_by, sequence_on_failure=sequence_on_failure)
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
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
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

        def register(target: Callable[P, R]) -> Task[P, R]:
            task: Task[P, R]
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
                                    pgbouncer=self._pgbouncer, app=self)
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
                    queue = AsyncQueue(self._async_pool, pgbouncer=self._pgbouncer, app=self)
                else:
                    queue = AsyncQueue(self._dsn, pgbouncer=self._pgbouncer, app=self)
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

    def _queues_made(self) -> list[Queue | AsyncQueue]:
        """The queues the App made or was lent so far (its sync queue, and its AsyncQueue per loop)."""
        made: list[Queue | AsyncQueue] = [] if self._queue is None else [self._queue]
        for future in list(self._async_queues.values()):
            if future.done() and not future.cancelled() and future.exception() is None:
                made.append(future.result())
        return made

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
