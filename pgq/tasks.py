"""`Task` (the handler of one job kind, with its defaults), `Deferral` (a task with job options, ready to
enqueue) and `Periodic` (a task's schedule). `App.task` and `App.periodic` create them."""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Protocol, TypeAlias, TypeVar

import psycopg

from .client import AsyncQueue, Queue
from .context import _context
from .cron import Schedule
from .errors import InvalidJob, PgqError
from .models import JSON, JobSpec, group_key_from
from .retries import RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")

Handler: TypeAlias = Callable[..., Any]
"""Any handler: a `def` or an `async def` taking the job's payload as keyword arguments."""

AnyTask: TypeAlias = "Task[..., Any]"
"""A task of any signature (where the handler's parameters do not matter: registries, follow-ups)."""

__all__ = ["AnyTask", "Deferral", "Enqueuer", "FollowUp", "Handler", "Periodic", "Task", "after_success",
           "follow_up_spec"]


class Enqueuer(Protocol):
    """What a task needs of the App it belongs to: the queues its jobs are enqueued through."""

    @property
    def queue(self) -> Queue:
        """The synchronous queue (thread-safe)."""
        ...

    async def async_queue(self) -> AsyncQueue:
        """The asynchronous queue of the running event loop."""
        ...


@dataclass(frozen=True, slots=True)
class _Options:
    queue: str | None = None
    priority: int | None = None
    delay: dt.timedelta | float | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    watermark: int | None = None
    max_attempts: int | None = None
    depends_on: Iterable[int] | None = None
    on_parent_failure: str = "cancel"
    group_key: str | None = None
    sequence_key: str | None = None
    sequence_on_failure: str | None = None
    unique_for: dt.timedelta | float | None = None
    on_conflict: str | None = None
    debounce: dt.timedelta | float | None = None


class Task(Generic[P, R]):
    """A registered handler: the code behind one job kind, with its defaults.

    Generic over the handler's parameters `P` and return type `R` (for an `async def`, the
    coroutine), so a type checker checks `defer`, `defer_async`, `spec` and calls against the
    handler's signature: `send_email.defer(to=1)` is reported for `send_email(to: str)`.

    Attributes: `name` (the job kind), `func`, `queue`, `priority`, `max_attempts` (None: the
    database default, 25), `retry` (a RetryPolicy), `timeout` (seconds or None), `concurrency_limit`
    (None: unlimited; a worker sets it in the database when it starts), `rate_limit` ((max_starts,
    seconds) or None; set likewise), `group_by` (the payload field whose value is a job's group key,
    or None), `group_concurrency` and `group_rate_limit` (per-group limits, None: none; set like the
    others), `on_success` and `on_failure` (a task or job kind enqueued
    atomically with the job's success, or with its failure after the last attempt; None: none),
    `is_async`. Calling the task
    calls the handler directly, without a queue.

    A payload is a JSON object of keyword arguments. Positional arguments given to `defer`,
    `defer_async` or `spec` are bound to the handler's parameter names (`send_email.defer("a@x",
    "hi")` stores `{"to": "a@x", "subject": "hi"}`); one that binds to a positional-only parameter or
    to `*args` has no name to store and raises InvalidJob.
    """

    def __init__(
        self,
        app: Enqueuer,
        func: Callable[P, R],
        *,
        name: str,
        queue: str,
        priority: int,
        max_attempts: int | None,
        retry: RetryPolicy,
        timeout: float | None,
        concurrency_limit: int | None,
        rate_limit: tuple[int, float] | None = None,
        on_success: FollowUp | None = None,
        on_failure: FollowUp | None = None,
        group_by: str | None = None,
        group_concurrency: int | None = None,
        group_rate_limit: tuple[int, float] | None = None,
        sequence_by: str | None = None,
        sequence_on_failure: str = "hold",
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
        self.group_by = group_by
        self.group_concurrency = group_concurrency
        self.group_rate_limit = group_rate_limit
        self.sequence_by = sequence_by
        self.sequence_on_failure = sequence_on_failure
        self.on_success = _check_follow_up(name, "on_success", on_success, {"job_id": 1, "result": None})
        self.on_failure = _check_follow_up(name, "on_failure", on_failure, {"job_id": 1, "error": ""})
        self.is_async = inspect.iscoroutinefunction(inspect.unwrap(func)) or inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        self._fitting: set[frozenset[str]] = set()
        # Validates queue, priority and max_attempts now, at import time, not at the first defer.
        JobSpec(name, {}, queue=queue, priority=priority, max_attempts=max_attempts)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the handler directly (no queue, no job): what it returns, for an `async def` a coroutine."""
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

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The payload of a call with `args` and `kwargs`: `kwargs` with each positional argument
        stored under the name of the parameter it binds to, checked by `check_arguments`.

        Raises InvalidJob when a positional argument has no parameter name to be stored under (it
        binds to a positional-only parameter or `*args`, or there are too many), when an argument is
        given twice, or when the result does not fit the handler.
        """
        if not args:
            return self.check_arguments(kwargs)
        params = list(self.signature.parameters.values())
        payload: dict[str, Any] = {}
        for index, value in enumerate(args):
            kind = params[index].kind if index < len(params) else None
            if kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
                if kind is inspect.Parameter.POSITIONAL_ONLY:
                    problem = f"positional argument {index + 1} binds to positional-only {params[index].name!r}"
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    problem = f"positional argument {index + 1} binds to *{params[index].name}"
                else:
                    problem = f"too many positional arguments ({len(args)})"
                raise InvalidJob(f"task {self.name!r}: bad arguments: {problem} "
                                 "(a payload stores every argument under its parameter name)")
            payload[params[index].name] = value
        twice = sorted(set(payload) & set(kwargs))
        if twice:
            raise InvalidJob(f"task {self.name!r}: bad arguments: multiple values for {', '.join(map(repr, twice))}")
        payload.update(kwargs)
        return self.check_arguments(payload)

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
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
        group_key: str | None = None,
        sequence_key: str | None = None,
        sequence_on_failure: str | None = None,
        unique_for: dt.timedelta | float | None = None,
        on_conflict: str | None = None,
        debounce: dt.timedelta | float | None = None,
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
    ) -> Deferral[P, R]:
        """Job options for the next `defer`: `task.configure(delay=10).defer(x=1)`.

        Options left out take the task's defaults. `conn`: enqueue inside the caller's transaction
        (a psycopg Connection for `defer`, an AsyncConnection for `defer_async`); the job exists if
        and only if that transaction commits, and pgq never commits it. Dedupe and watermark rules:
        see `Queue.enqueue_many`; dependencies (`depends_on`, `on_parent_failure`): see
        `Queue.enqueue`. `group_key`: the job's group; left out, the value of the task's `group_by`
        field of the payload (if any). `sequence_key`, `sequence_on_failure`: the job's sequence and
        what its failure does to it; left out, the task's `sequence_by` field of the payload and its
        `sequence_on_failure`. `unique_for`, `on_conflict`, `debounce`: the dedupe key's uniqueness
        variant (see `JobSpec`). Nothing is validated or sent until `defer`.
        """
        options = _Options(queue, priority, delay, run_at, dedupe_key, watermark, max_attempts, depends_on,
                           on_parent_failure, group_key, sequence_key, sequence_on_failure, unique_for,
                           on_conflict, debounce)
        return Deferral(self, options, conn)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """The JobSpec `defer(...)` would enqueue, for batches: `app.queue.enqueue_many(specs)`.

        Raises InvalidJob when the arguments do not fit the handler.
        """
        return self.configure().spec(*args, **kwargs)

    def defer(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue a job of this task with the arguments as its payload; return its id.

        The payload is `kwargs`, plus positional arguments under their parameter names (see the
        class docstring). Uses the App's synchronous queue (thread-safe). Raises InvalidJob (nothing
        written) when the arguments do not fit the handler or are not JSON-serializable.
        """
        return self.configure().defer(*args, **kwargs)

    async def defer_async(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """`defer` for asyncio code: uses the App's AsyncQueue of the running event loop (inside a
        worker, the worker's own pool)."""
        return await self.configure().defer_async(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class Deferral(Generic[P, R]):
    """A task with job options, ready to enqueue (see `Task.configure`); generic like its Task."""

    task: Task[P, R]
    options: _Options
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """The JobSpec of a job with these arguments (see `Task.payload`) and options; raises InvalidJob."""
        task, o = self.task, self.options
        payload = task.payload(args, kwargs)
        return JobSpec(
            task.name,
            payload,
            queue=task.queue if o.queue is None else o.queue,
            priority=task.priority if o.priority is None else o.priority,
            run_at=o.run_at,
            delay=o.delay,
            dedupe_key=o.dedupe_key,
            watermark=o.watermark,
            max_attempts=task.max_attempts if o.max_attempts is None else o.max_attempts,
            depends_on=o.depends_on,
            on_parent_failure=o.on_parent_failure,
            group_key=group_key_from(task.group_by, payload) if o.group_key is None else o.group_key,
            sequence_key=(group_key_from(task.sequence_by, payload, "sequence_by") if o.sequence_key is None
                          else o.sequence_key),
            sequence_on_failure=task.sequence_on_failure if o.sequence_on_failure is None else o.sequence_on_failure,
            unique_for=o.unique_for,
            on_conflict=o.on_conflict,
            debounce=o.debounce,
        )

    def defer(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue one job with these arguments; return its id. See `Task.defer` and `Task.configure`.

        Raises PgqError when the options carry an AsyncConnection.
        """
        spec = self.spec(*args, **kwargs)
        if self.conn is not None and not isinstance(self.conn, psycopg.Connection):
            raise PgqError("defer() needs a psycopg.Connection as conn; use defer_async() with an AsyncConnection")
        return self.task.app.queue.enqueue_many([spec], conn=self.conn)[0]

    async def defer_async(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue one job with these arguments; return its id. See `Task.defer_async`.

        Raises PgqError when the options carry a (sync) Connection.
        """
        spec = self.spec(*args, **kwargs)
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

    task: AnyTask
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


FollowUp: TypeAlias = "str | Task[..., Any]"
"""What `after_success`, `on_success` and `on_failure` accept: a Task, or a job kind (str). A kind
that names a task of the worker's app takes that task's defaults (queue, priority, max_attempts)."""

_FOLLOW_UP_OPTIONS = frozenset(
    ("queue", "priority", "run_at", "delay", "dedupe_key", "watermark", "max_attempts", "depends_on",
     "on_parent_failure", "group_key", "sequence_key", "sequence_on_failure"))


def after_success(kind_or_task: FollowUp, payload: JSON = None, **enqueue_options: Any) -> None:
    """Record a job to enqueue when the calling handler's attempt succeeds: the worker inserts it in
    the transaction that completes the attempt, so it exists if and only if that completion
    committed. If the handler raises, snoozes or is cancelled, or its lease was lost, nothing is
    enqueued; a completion that turns into a dirty re-run (a newer watermark arrived) enqueues
    nothing either, as the next run records its own.

    `kind_or_task`: a Task (its defaults apply, and `payload` must fit its handler) or a job kind;
    `payload`: the job's payload (for a Task, a dict of keyword arguments); `enqueue_options`: as
    `Queue.enqueue` (queue, priority, run_at, delay, dedupe_key, watermark, max_attempts,
    depends_on, on_parent_failure, group_key, sequence_key, sequence_on_failure). May be called
    several times. Raises InvalidJob at once for bad
    input (nothing recorded), PgqError outside a handler run by a pgq worker.
    """
    context = _context()
    spec = follow_up_spec(kind_or_task, payload, enqueue_options, context.tasks)
    if context.follow_ups is None:
        context.follow_ups = []
    context.follow_ups.append(spec)


def follow_up_spec(target: FollowUp, payload: JSON, options: Mapping[str, Any],
                   tasks: Mapping[str, object]) -> JobSpec:
    """The JobSpec of a follow-up job: `target` a Task, or a job kind (taking the defaults of the
    task of that name in `tasks`, if any); `options` as `Queue.enqueue`'s. Raises InvalidJob for an
    unknown option, a target that is neither, or a payload that does not fit."""
    unknown = sorted(set(options) - _FOLLOW_UP_OPTIONS)
    if unknown:
        raise InvalidJob(f"unknown enqueue option(s) for a follow-up job: {', '.join(unknown)}")
    if isinstance(target, str):
        named = tasks.get(target)
        if isinstance(named, Task):
            target = named
        else:
            return JobSpec(target, payload, **options)
    if not isinstance(target, Task):
        raise InvalidJob(f"a follow-up job needs a Task or a job kind (str), got {type(target).__name__}")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidJob(f"task {target.name!r}: the payload must be a dict of keyword arguments, "
                         f"got {type(payload).__name__}")
    return target.configure(**options).spec(**payload)


def _check_follow_up(name: str, what: str, target: object, example: dict[str, Any]) -> FollowUp | None:
    """`target` of a task's `on_success` / `on_failure`, checked at registration: None, a job kind, or
    a Task whose handler takes the follow-up's payload (`example`'s keys)."""
    if target is None:
        return None
    if isinstance(target, str):
        if not target or "\x00" in target:
            raise InvalidJob(f"task {name!r}: {what} must be a non-empty job kind")
        return target
    if not isinstance(target, Task):
        raise InvalidJob(f"task {name!r}: {what} must be a Task or a job kind (str), got {type(target).__name__}")
    try:
        target.signature.bind(**example)
    except TypeError as exc:
        keys = ", ".join(example)
        raise InvalidJob(f"task {name!r}: {what} task {target.name!r} must take the keyword arguments "
                         f"{keys}: {exc}") from None
    return target
