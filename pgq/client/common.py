"""What `Queue` and `AsyncQueue` share: argument checks, the pool settings (autocommit, PgBouncer),
the kept connection's rules, the retry policy of retry-safe operations, and the pieces of `wait`."""


from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .. import bounds
from .._jitter import exponential_wait
from ..errors import InvalidJob, PgqError
from ..models import JSON, Claim, JobSpec, group_key_from

if TYPE_CHECKING:
    from ..waiting import Waiters

T = TypeVar("T")

DEFAULT_LEASE = dt.timedelta(seconds=60)
SpecLike = JobSpec | Mapping[str, Any]


def _specs(specs: Iterable[SpecLike]) -> list[JobSpec]:
    out: list[JobSpec] = []
    for s in specs:
        if isinstance(s, JobSpec):
            out.append(s)
        elif isinstance(s, Mapping):
            try:
                out.append(JobSpec(**s))
            except TypeError as exc:
                raise InvalidJob(f"bad job spec {dict(s)!r}: {exc}") from None
        else:
            raise InvalidJob(f"a job spec must be a JobSpec or a mapping, got {type(s).__name__}")
    return out


def _lease_s(claim: Claim, lease: dt.timedelta | float | None) -> float:
    return bounds.lease_s("lease", claim.lease if lease is None else lease)


def _retry_args() -> dict[str, Any]:
    """tenacity's settings for retrying an operation after a connection error. Only operations
    marked retry_safe get there, after a first failure: a connection error after a statement reached
    the server leaves its outcome unknown, so the others raise at once. tenacity is imported then,
    not with pgq (5 ms off `import pgq`)."""
    import tenacity

    return {
        "retry": tenacity.retry_if_exception(connection_failure),
        "stop": tenacity.stop_after_attempt(4),
        "wait": exponential_wait(0.1, maximum=2.0),
        "reraise": True,
    }


def connection_failure(exc: BaseException) -> bool:
    """Whether `exc` may be a lost connection, worth retrying: an OperationalError other than a lock
    or statement timeout (those reached the server, and retrying would only wait again)."""
    return isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled))


WAIT_POLL_S = 0.5
"""How often `wait` reads the job when it cannot LISTEN (PgBouncer in transaction mode, no listen_dsn)."""


def _wait_deadline(timeout: dt.timedelta | float | None) -> float | None:
    """The monotonic deadline of a wait of `timeout` (None: no deadline); InvalidJob if negative."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise InvalidJob(f"timeout must be seconds >= 0 (or a timedelta), got {timeout!r}")
    return time.monotonic() + seconds


def _wait_left(deadline: float | None, job_id: int, polling: bool) -> float | None:
    """Seconds to sleep before the next look at the job; raises TimeoutError past the deadline."""
    if deadline is None:
        return WAIT_POLL_S if polling else None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"job {job_id} did not finish in time")
    return min(left, WAIT_POLL_S) if polling else left


def _waiters(pool: ConnectionPool[Any] | AsyncConnectionPool[Any], pgbouncer: bool,
             listen_dsn: str | None) -> Waiters | None:
    """The LISTEN side of `wait` for a client on `pool` (None: it polls: behind PgBouncer without
    `listen_dsn`, or on a pool whose connection string or arguments are callables)."""
    from ..waiting import Waiters  # the listener and tenacity load with the first wait, not with pgq

    if listen_dsn is not None:
        return Waiters(listen_dsn)
    conninfo, kwargs = pool.conninfo, pool.kwargs
    if pgbouncer or not isinstance(conninfo, str) or not isinstance(kwargs, dict):
        return None  # no direct connection to listen on, or one only the pool knows how to make
    return Waiters(conninfo, {k: v for k, v in kwargs.items() if k not in ("prepare_threshold", "autocommit")})


# autocommit: a single-statement operation is its own transaction (one round trip); the operations
# that need several statements open a transaction explicitly.
_POOL_KWARGS: dict[str, Any] = {"autocommit": True}

# Behind PgBouncer in transaction pooling mode, consecutive transactions of one client connection may
# run on different server connections. psycopg prepares a statement on the server after it ran
# `prepare_threshold` (5) times on a connection and then only sends its name: on another server
# connection that name is unknown ("prepared statement "_pg3_0" does not exist"), taken by another
# client's statement ("... already exists"), or worse, bound to a different query. PgBouncer before
# 1.21 (Debian 12 ships 1.18) cannot track protocol-level prepared statements at all, so pgq sends
# every statement unprepared (one extra parse per statement on the server: microseconds).
PGBOUNCER_KWARGS: dict[str, Any] = {"prepare_threshold": None}


# A queue that owns its pool (of two or more connections) keeps one connection out of it between
# calls and runs every call it can on that one: getconn/putconn cost about 40 us of a 500 us enqueue.
# A call finding it busy takes another from the pool as usual, so the pool's other connections serve
# concurrent callers. It goes back to the pool when its state is anything but idle (broken, a query
# cut off by a cancellation), when the queue closes, and every SPARE_MAX_AGE seconds, so that the
# pool's health checks and connection lifetime apply to it too.
#
# The kept connection keeps its cursor as well (while it holds a small result, see
# _ops.keeps_cursor): a new cursor starts without the loaders and dumpers the last one had found for
# the same columns and parameters, and building them again is most of the client's work in a short
# call that follows an idle spell (an idle worker's claim: 0.14 ms of its wake-up, see bench/README.md).
SPARE_MAX_AGE = 60.0
_IDLE = psycopg.pq.TransactionStatus.IDLE


def _spare_done(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], since: float) -> bool:
    """Whether the kept connection, kept since `since` (monotonic), goes back to the pool now."""
    return conn.broken or conn.info.transaction_status != _IDLE or time.monotonic() - since > SPARE_MAX_AGE


def pool_kwargs(pgbouncer: bool) -> dict[str, Any]:
    """psycopg connection kwargs of the pools pgq creates: autocommit, and with `pgbouncer` (the DSN
    is a PgBouncer in transaction pooling mode) no server-side prepared statements."""
    return {**_POOL_KWARGS, **PGBOUNCER_KWARGS} if pgbouncer else dict(_POOL_KWARGS)


def _keeps_connection(pool: ConnectionPool[Any] | AsyncConnectionPool[Any], owned: bool, wanted: bool | None) -> bool:
    """Whether a queue keeps a connection of `pool` between calls (see SPARE_MAX_AGE): as `wanted`, by
    default when the queue created the pool, and never with a pool of one. Raises PgqError when asked
    to keep one of a caller's pool whose connections are not in autocommit: a kept connection runs
    each call as its own transaction and commits nothing itself."""
    if wanted is False or (wanted is None and not owned) or pool.max_size < 2:
        return False
    if not owned and not (isinstance(pool.kwargs, dict) and pool.kwargs.get("autocommit") is True):
        raise PgqError("keep_connection=True with a pool of your own: create the pool with "
                       "kwargs={'autocommit': True, ...}")
    return True


def check_pgbouncer_pool(pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> None:
    """With pgbouncer=True and a pool the caller owns, make sure its connections prepare nothing.

    Raises PgqError unless the pool was created with ``kwargs={"prepare_threshold": None, ...}``
    (pgq cannot change the connections of a pool it does not own)."""
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    if "prepare_threshold" not in kwargs or kwargs["prepare_threshold"] is not None:
        raise PgqError(
            "pgbouncer=True with a pool of your own: create the pool with "
            "kwargs={'prepare_threshold': None, ...} so that its connections never prepare statements "
            "(PgBouncer in transaction mode breaks them)"
        )




def _non_negative(name: str, value: dt.timedelta | float) -> float:
    # A retry_in or snooze delay: finite, from 0 to 100 years (pgq.bounds).
    return bounds.delay_s(name, value)


class Wakeup:
    """A wake-up signal a thread may set for a blocking waiter (the sync twin of `AsyncWakeup`)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        """Wake the waiter; from any thread."""
        self._event.set()

    def wait(self, timeout: float | None) -> None:
        """Block until set or `timeout` seconds (None: no limit) pass."""
        self._event.wait(timeout)

    def clear(self) -> None:
        """Forget an earlier `set`."""
        self._event.clear()


class AsyncWakeup:
    """A wake-up signal a thread may set for a coroutine waiting on the event loop it was made in."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        """Wake the waiter; from any thread."""
        self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float | None) -> None:
        """Return once set or after `timeout` seconds (None: no limit)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)

    def clear(self) -> None:
        """Forget an earlier `set`."""
        self._event.clear()


SpareLock = threading.Lock
"""Guards a sync queue's kept connection: one thread at a time uses it, others take a pool
connection instead of waiting (`acquire(blocking=False)`); `close()` waits for it (`acquire()`)."""


class SpareFlag:
    """The async twin of the `threading.Lock` guarding a sync queue's kept connection: one coroutine
    at a time uses it, and others take a pool connection instead of waiting (`acquire` never waits)."""

    def __init__(self) -> None:
        self._held = False

    def acquire(self, blocking: bool = True) -> bool:
        """Take the flag if it is free; returns whether it was taken (never waits)."""
        if self._held:
            return False
        self._held = True
        return True

    def release(self) -> None:
        """Free the flag."""
        self._held = False


class TaskOptions(Protocol):
    """The job options a registered task (pgq.Task) gives its jobs, as a queue reads them."""

    @property
    def queue(self) -> str:
        """The queue of the task's jobs."""

    @property
    def priority(self) -> int:
        """The priority of the task's jobs."""

    @property
    def max_attempts(self) -> int | None:
        """The task's max_attempts (None: the database default)."""

    @property
    def group_by(self) -> str | None:
        """The payload field whose value is a job's group key (None: jobs have no group by default)."""


def sequence_options(app: TaskRegistry | None, kind: str, payload: JSON, sequence_key: str | None,
                     sequence_on_failure: str | None) -> dict[str, Any]:
    """The sequence_key and sequence_on_failure of a job of `kind` enqueued by name: each given as
    is; one left out (None) is that of the task `app` registered under `kind` (the key read from
    `payload` by its `sequence_by`), or without one no sequence and "hold"."""
    task = None if app is None else app.tasks.get(kind)
    by = getattr(task, "sequence_by", None)
    if sequence_key is None and by is not None:
        sequence_key = group_key_from(by, payload, "sequence_by")
    if sequence_on_failure is None:
        sequence_on_failure = getattr(task, "sequence_on_failure", None) or "hold"
    return {"sequence_key": sequence_key, "sequence_on_failure": sequence_on_failure}


class EnqueueSpan(Protocol):
    """An enqueue being traced (pgq.otel): `contexts` holds the trace context to store with each job
    (a JSON object's text, or None), `end` closes the span with the ids or the error."""

    contexts: list[str | None]

    def end(self, ids: list[int] | None, error: BaseException | None) -> None:
        """Close the span: the enqueue returned `ids`, or raised `error`."""


class EnqueueTracer(Protocol):
    """What an instrumented queue calls around each enqueue (pgq.otel.instrument sets one)."""

    def enqueue_started(self, specs: Sequence[JobSpec]) -> EnqueueSpan:
        """Open the producer span of an enqueue of `specs` (not made current)."""


class TaskRegistry(Protocol):
    """What a queue given `app=` reads of it: the registered tasks by kind (a pgq.App)."""

    @property
    def tasks(self) -> Mapping[str, TaskOptions]:
        """The registered tasks by name (job kind)."""


def job_options(app: TaskRegistry | None, kind: str, queue: str | None, priority: int | None,
                max_attempts: int | None, payload: JSON = None,
                group_key: str | None = None) -> tuple[str, int, int | None, str | None]:
    """The queue, priority, max_attempts and group key of a job of `kind` enqueued by name: each
    option given as is; one left out (None) is that of the task `app` registered under `kind` (the
    group key: read from `payload` by the task's `group_by`), or without one the JobSpec default
    ("default", 0, None: the database's, None: no group)."""
    task = None if app is None else app.tasks.get(kind)
    if task is None:
        return ("default" if queue is None else queue, 0 if priority is None else priority, max_attempts, group_key)
    return (task.queue if queue is None else queue, task.priority if priority is None else priority,
            task.max_attempts if max_attempts is None else max_attempts,
            group_key_from(task.group_by, payload) if group_key is None else group_key)
