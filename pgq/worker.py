"""The worker: claims jobs, runs their handlers, acknowledges them in batches, keeps their leases
alive, runs maintenance, and drains on shutdown. asyncio only; sync handlers run in threads.

One event loop runs these tasks, each owning one concern:

- the producer claims up to the number of free slots in one claim whenever jobs may be ready:
  after a NOTIFY for one of its queues (the `Listener`), when its poll timer fires (every
  `poll_interval`, jittered, or sooner when the database says a scheduled job is due sooner), or when
  a slot frees up while the last claim came back full. A second claim may overlap a claim in flight
  (`claims_in_flight`), for the slots that freed up meanwhile;
- each job's handler runs in its own slot: an `async def` handler in a task of its own on the loop, a
  plain `def` handler in a pool of daemon threads (at most one per slot), so a slow handler never
  blocks claims, heartbeats or shutdown. A sync handler without a timeout needs no task at all: its
  thread hands the outcome back to the loop in a callback (a task awaits the ones with a timeout);
- the flusher acknowledges finished jobs in batches: at most one statement per kind of outcome
  (complete / fail / snooze) per flush, sent `ack_delay` after the oldest pending acknowledgement or
  as soon as `ack_batch` are pending. Every acknowledgement is fenced by its lease token; a lost lease
  is logged, never raised;
- the heartbeat renews the leases of all jobs in flight (running or awaiting acknowledgement) in one
  statement every lease/3;
- `Maintenance` (rescue, periodic enqueue, retention), each run led by one worker at a time.

Every database step catches `psycopg.OperationalError` and retries with backoff: a Postgres restart
is logged and survived. Shutdown (`stop()`, SIGTERM or SIGINT): stop claiming, let running jobs finish
for up to `drain_timeout`, hand the others straight back to the queue (`release`: no attempt spent,
no waiting for lease expiry), flush acknowledgements, close. A second signal (or `abort()`) skips the
waiting.

Logs: logger "pgq.worker", one line when a job starts and one when it finishes, with `extra` fields
`event`, `job_id`, `kind`, `queue`, `attempt`, `duration_ms`, `outcome`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import datetime as dt
import functools
import logging
import os
import queue as queue_module
import random
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from . import _ops
from .app import App, PermanentFailure, Snooze, Task, _current, _job_context
from .client import AsyncQueue, pool_kwargs
from .errors import InvalidJob, NotMigrated, PgqError, one_line
from .listener import Listener
from .maintenance import Maintenance
from .metrics import BacklogReader, Metrics, MetricsServer
from .models import JSON, Claim, Job, JobStatus, encode_json

__all__ = ["Worker", "WorkerConfig", "default_worker_name"]

logger = logging.getLogger("pgq.worker")

T = TypeVar("T")
AckT = TypeVar("AckT")

MAX_ERROR_CHARS: Final = 8000
"""Error texts (message and traceback) longer than this are cut in the middle."""

_DAY = 86400.0

PREFETCH_HORIZON: Final = 0.25
"""Adaptive prefetch holds about this many seconds of work (at the rate jobs start)."""
PREFETCH_MAX: Final = 2048
"""Adaptive prefetch never holds more jobs than this (or than `concurrency`, when larger)."""
PREFETCH_MAX_BYTES: Final = 32 * 1024 * 1024
"""Nor more jobs than make this many bytes of payload, at the moving mean of the payload sizes its
claims brought (or than `concurrency`, when larger): big payloads would otherwise fill the worker's
memory (2048 jobs of 1 MB, the largest payload accepted, are 2 GB before they are even parsed)."""
PREFETCH_FIRST_LOOK: Final = 4
"""Adaptive prefetch takes its first look at the rate once the slots have been refilled this many
times (counted from the first claim's jobs), or after 50 ms, whichever comes first; later looks come
every 50 ms at most."""
HANDLER_HEAD_START: Final = 0.001
"""After a claim that emptied the queue, the jobs it started run this long (seconds) before the
worker asks when the next scheduled job is due."""


def default_worker_name() -> str:
    """`<hostname>-<pid>`: the default `claimed_by` of a worker."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Settings of a Worker, validated on construction (InvalidJob names the bad one). Durations are
    seconds; `WorkerConfig.build` also accepts timedeltas.

    - `queues`: queues to claim from (None: every queue).
    - `concurrency`: jobs run at once (also the size of the thread pool for sync handlers).
    - `lease`: lease of each attempt; renewed every lease/3 while the job runs. A job whose worker
      stops renewing is rescued about half a lease after its lease expires. Maintenance also ends
      database sessions stuck for half a lease writing the result of a pgq statement to a client
      that stopped reading (see `pgq.maintenance.Rescuer`).
    - `poll_interval`: fallback poll period (jittered ±20 %) when no notification arrives.
    - `drain_timeout`: at shutdown, how long running jobs may take to finish before being released.
    - `claimed_by`: the worker's name in `pgq.jobs.claimed_by` (default `<hostname>-<pid>`).
    - `listen`: wake on NOTIFY (one extra connection); False polls only.
    - `listen_dsn`: where that LISTEN connection goes (default: the worker's DSN). Behind PgBouncer
      in transaction mode give a direct connection to the same database here.
    - `pgbouncer`: the worker's DSN is a PgBouncer in transaction pooling mode (None: the App's
      `pgbouncer`). Its connections then prepare no statements, and without `listen_dsn` the
      worker polls only (LISTEN needs a session of its own, which such a pooler does not keep).
    - `ack_delay`: longest wait before a finished job's acknowledgement is sent, to batch them.
    - `ack_batch`: send at once when this many acknowledgements are pending. Claims pause once as
      many finished jobs await their acknowledgement as the largest of `ack_batch`, twice the
      concurrency and twice the current prefetch buffer: a worker whose acknowledgements do not get
      through stops taking work, and a crash re-runs at most that many jobs that had finished. A
      finished job keeps its payload until acknowledged, so for big payloads `ack_batch` counts only
      up to twice the jobs PREFETCH_MAX_BYTES allows the adaptive buffer.
    - `maintenance`: take part in maintenance (rescue, periodic enqueue, retention).
    - `rescue_interval`: seconds between rescue runs (default lease/2).
    - `retention`: finished jobs are deleted this long after finishing (None: kept forever).
    - `retention_interval`: seconds between retention runs.
    - `pool_size`: most connections of the worker's pool (default 4 + concurrency/4, at most 10),
      besides the LISTEN connection. Handlers calling `defer_async` share it.
    - `dsn`: connect here instead of `app.dsn`.
    - `shutdown_timeout`: longest wait at shutdown for the last acknowledgements and releases when
      the database does not answer (jobs not acknowledged are rescued after their lease).
    - `prefetch`: jobs claimed beyond the free slots and held, leased and heartbeated, until a slot
      frees; 0 claims only for free slots. Default (None): adaptive, about PREFETCH_HORIZON seconds
      of work at the rate jobs start, at least `concurrency` and at most PREFETCH_MAX jobs and
      PREFETCH_MAX_BYTES of payload: fast jobs get big claims (few round trips per job), slow ones a
      small buffer that leaves a shallow queue to other workers, big payloads one that fits in memory.
      A fixed `prefetch` is taken as given. A shutdown hands held jobs straight back.
    - `claims_in_flight`: claims that may run at once (each for the room free when it started; a
      second one only for a worthwhile batch). 1 makes claims strictly sequential. A claim starts at
      once when a slot would otherwise idle, else when a quarter of the prefetch buffer is gone.
    - `metrics_port`: serve Prometheus metrics at http://metrics_host:metrics_port/metrics from a
      thread of their own (None: no server; 0: any free port, see `Worker.metrics_address`). See
      `pgq.metrics` for the metrics.
    - `metrics_host`: address the metrics server binds (default 127.0.0.1: this machine only).
    """

    queues: tuple[str, ...] | None = None
    concurrency: int = 10
    lease: float = 60.0
    poll_interval: float = 1.0
    drain_timeout: float = 30.0
    claimed_by: str = field(default_factory=default_worker_name)
    listen: bool = True
    ack_delay: float = 0.005
    ack_batch: int = 1000
    maintenance: bool = True
    rescue_interval: float | None = None
    retention: float | None = 7 * _DAY
    retention_interval: float = 600.0
    pool_size: int | None = None
    dsn: str | None = None
    shutdown_timeout: float = 10.0
    claims_in_flight: int = 2
    prefetch: int | None = None
    listen_dsn: str | None = None
    pgbouncer: bool | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if self.queues is not None and (
            isinstance(self.queues, str) or not self.queues
            or not all(isinstance(q, str) and q for q in self.queues)
        ):
            raise InvalidJob(f"queues must be None or a non-empty list of queue names, got {self.queues!r}")
        _check_int("concurrency", self.concurrency, 1)
        _check_int("ack_batch", self.ack_batch, 1)
        _check_int("claims_in_flight", self.claims_in_flight, 1)
        if self.prefetch is not None:
            _check_int("prefetch", self.prefetch, 0)
        if self.pool_size is not None:
            _check_int("pool_size", self.pool_size, 1)
        if self.metrics_port is not None:
            _check_int("metrics_port", self.metrics_port, 0)
            if self.metrics_port > 65535:
                raise InvalidJob(f"metrics_port must be an int in 0..65535, got {self.metrics_port!r}")
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise InvalidJob("metrics_host must be a non-empty str")
        for name in ("lease", "poll_interval", "retention_interval", "shutdown_timeout"):
            _check_seconds(name, getattr(self, name), positive=True)
        for name in ("drain_timeout", "ack_delay"):
            _check_seconds(name, getattr(self, name), positive=False)
        for name in ("rescue_interval", "retention"):
            if getattr(self, name) is not None:
                _check_seconds(name, getattr(self, name), positive=True)
        if not isinstance(self.claimed_by, str) or not self.claimed_by:
            raise InvalidJob("claimed_by must be a non-empty str")
        if self.dsn is not None and not isinstance(self.dsn, str):
            raise InvalidJob("dsn must be a str")
        if self.listen_dsn is not None and (not isinstance(self.listen_dsn, str) or not self.listen_dsn):
            raise InvalidJob("listen_dsn must be a non-empty str")
        if self.listen_dsn is not None and not self.listen:
            raise InvalidJob("listen_dsn is given but listen is False: drop one of them")
        if self.pgbouncer is not None and not isinstance(self.pgbouncer, bool):
            raise InvalidJob(f"pgbouncer must be a bool or None, got {self.pgbouncer!r}")

    @classmethod
    def build(cls, **settings: Any) -> WorkerConfig:
        """Build from keyword settings: timedeltas become seconds, a list of queues a tuple, a None
        `claimed_by` the default name. Raises InvalidJob for unknown or invalid settings."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InvalidJob(f"unknown worker setting(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        values: dict[str, Any] = {}
        for name, value in settings.items():
            if isinstance(value, dt.timedelta):
                value = value.total_seconds()
            if name == "queues" and value is not None and not isinstance(value, str):
                value = tuple(value)
            if name == "claimed_by" and value is None:
                continue
            values[name] = value
        return cls(**values)

    @property
    def effective_pool_size(self) -> int:
        """`pool_size`, or its default for this concurrency."""
        return self.pool_size if self.pool_size is not None else 4 + min(self.concurrency // 4, 6)

    @property
    def effective_rescue_interval(self) -> float:
        """`rescue_interval`, or half the lease."""
        return self.rescue_interval if self.rescue_interval is not None else self.lease / 2


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidJob(f"{name} must be an int >= {low}, got {value!r}")


def _check_seconds(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        value > 0 if positive else value >= 0
    ) or value == float("inf"):
        raise InvalidJob(f"{name} must be a finite number of seconds {'> 0' if positive else '>= 0'}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Sync handlers: daemon threads


_Outcome = Callable[[Any, BaseException | None], None]  # (result, error) of one item, on the loop


class _Threads:
    """Runs sync handlers in daemon threads, at most `size` of them, started on demand.

    Daemon threads, unlike concurrent.futures', never hold up interpreter exit: a handler abandoned
    after its timeout, or still running when the worker aborts, cannot keep the process alive.

    Few wake-ups for many short handlers. A thread is "looking" while it is awake and not running a
    handler. `submit` wakes a sleeping thread (or starts one) only when no thread is looking, and a
    thread that takes work while more waits and no other thread is looking wakes the next one. So a
    burst of short handlers is run by one or two awake threads in turn, while blocking handlers still
    each get a thread of their own within microseconds (a chain of wake-ups). Outcomes go back to
    `loop` in batches: a thread appends to a deque and wakes the loop only when no wake-up is already
    on its way (one write to the loop's self-pipe per burst). Once the loop is closed they are
    dropped (nobody waits for them any more).

    Two ways in: `submit` returns a future (for callers that await, e.g. with a timeout); `call`
    takes a callback run on the loop with the outcome, which spares a future and a task per item
    (the worker's path for sync handlers without a timeout).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, name: str) -> None:
        self._loop = loop
        self._size = size
        self._name = name
        self._items: collections.deque[tuple[_Outcome, Callable[[], Any]]] = collections.deque()
        self._tokens: queue_module.SimpleQueue[bool] = queue_module.SimpleQueue()  # a sleeper wakes per token
        self._lock = threading.Lock()  # guards the counts below
        self._threads = 0
        self._looking = 0  # awake, not running a handler: will take the next item
        self._sleeping = 0  # waiting for a token
        self._closing = False
        self._done: collections.deque[tuple[_Outcome, Any, BaseException | None]] = collections.deque()
        self._wake_sent = False  # a _deliver is scheduled on the loop and has not started yet

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run `fn()` in a thread; return a future of the loop that gets its result or exception.
        Call from the loop's thread."""
        future: asyncio.Future[Any] = self._loop.create_future()
        self.call(fn, functools.partial(_settle_future, future))
        return future

    def call(self, fn: Callable[[], Any], done: _Outcome) -> None:
        """Run `fn()` in a thread, then `done(result, None)` or `done(None, exception)` on the loop
        (never once the loop is closed). Call from the loop's thread. An exception from `done` is
        logged, and does not keep other outcomes from being delivered."""
        self._items.append((done, fn))
        with self._lock:
            if self._looking == 0:
                self._wake_one()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their handler returns."""
        with self._lock:
            self._closing = True
            sleepers, self._sleeping = self._sleeping, 0
            self._looking += sleepers
        for _ in range(sleepers):
            self._tokens.put(True)

    def _wake_one(self) -> None:
        # Under _lock: one more thread looking for work, a sleeper if there is one, else a new thread
        # while below `size` (at most `size` items are ever waiting or running: the worker's slots).
        if self._sleeping:
            self._sleeping -= 1
            self._looking += 1
            self._tokens.put(True)
        elif self._threads < self._size:
            self._threads += 1
            self._looking += 1
            threading.Thread(target=self._serve, name=f"{self._name}-{self._threads}", daemon=True).start()

    def _deliver(self) -> None:
        # Clear the flag before draining: an outcome appended after this line schedules another
        # _deliver, and one appended before it is drained below, so none is left behind.
        self._wake_sent = False
        done = self._done
        while done:
            callback, result, error = done.popleft()
            try:
                callback(result, error)
            except Exception:
                logger.exception("delivering a sync handler's outcome failed", extra={"event": "worker_bug"})

    def _serve(self) -> None:
        items, lock = self._items, self._lock
        while True:
            try:
                callback, fn = items.popleft()
            except IndexError:
                with lock:
                    if items:  # appended meanwhile, by a submit that counted on this thread
                        continue
                    self._looking -= 1
                    if self._closing:
                        self._threads -= 1
                        return
                    self._sleeping += 1
                self._tokens.get()  # whoever hands the token has counted this thread as looking
                continue
            with lock:
                self._looking -= 1
                if items and not self._looking:  # more work and nobody else awake for it
                    self._wake_one()
            try:
                result, error = fn(), None
            except BaseException as exc:
                result, error = None, exc
            with lock:
                self._looking += 1
            self._done.append((callback, result, error))
            if not self._wake_sent:
                self._wake_sent = True
                with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is gone
                    self._loop.call_soon_threadsafe(self._deliver)
            del callback, fn, result, error


def _settle_future(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


# ---------------------------------------------------------------------------------------------
# The worker


class _HandlerTimeout(Exception):
    """An attempt ran past its task's timeout."""


class _Rejected(Exception):
    """A job this worker cannot run at all (unknown kind, bad payload): failed without retries."""


@dataclass(slots=True, eq=False)
class _Running:
    claim: Claim
    claimed_at: float
    task: asyncio.Task[None] | None = None  # None: a sync handler run through _Threads.call
    released: bool = False
    started: float = 0.0  # monotonic, when its handler was started


@dataclass(slots=True)
class _Acks:
    completes: list[tuple[Claim, JSON]] = field(default_factory=list)
    fails: list[tuple[Claim, str, float | None, bool]] = field(default_factory=list)
    snoozes: list[tuple[Claim, float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.completes) + len(self.fails) + len(self.snoozes)

    def claims(self) -> Iterable[Claim]:
        yield from (c for c, _ in self.completes)
        yield from (c for c, _, _, _ in self.fails)
        yield from (c for c, _ in self.snoozes)


class Worker:
    """Runs the tasks of an App: see the module docstring. Build it with `app.worker(...)`.

    `run()` blocks until the worker has shut down (it installs SIGTERM/SIGINT handlers: first signal
    drains, second aborts); `await run_async()` does the same inside a running loop. A Worker runs
    once. `stop()` and `abort()` may be called from any thread, before or while it runs. The worker
    owns its connection pool and LISTEN connection and closes both. `run_async` raises NotMigrated
    when the database has no pgq schema; database outages are survived, never raised.
    """

    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        for p in app.periodic_tasks:
            if self.config.maintenance and self.config.retention is not None and p.catch_up >= self.config.retention:
                raise InvalidJob(
                    f"periodic {p.name!r}: catch_up ({p.catch_up:g} s) must be shorter than the worker's "
                    f"retention ({self.config.retention:g} s)"
                )
        self._tasks = app.tasks
        self._started = False
        self._early: str | None = None  # "stop" or "abort" requested before run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._counts: dict[str, int] = dict.fromkeys(
            ("claimed", "succeeded", "retried", "failed", "snoozed", "released", "lost"), 0)
        self.metrics = Metrics(self.config.claimed_by, queues=self.config.queues,
                               concurrency=self.config.concurrency)
        """The worker's Prometheus metrics (served when `metrics_port` is set; `render()` them anywhere)."""
        self._metrics_server: MetricsServer | None = None

    # -- public API --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The worker's `claimed_by`."""
        return self.config.claimed_by

    @property
    def stats(self) -> dict[str, int]:
        """Counters since start: claimed, succeeded, retried, failed, snoozed, released, lost
        (acknowledgements refused because the lease was lost). A copy; read from any thread."""
        return dict(self._counts)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """(host, port) the metrics server listens on while the worker runs; None without one."""
        return self._metrics_server.address if self._metrics_server is not None else None

    def _count(self, event: str, job: Job) -> None:
        self._counts[event] += 1
        self.metrics.job_event(event, job.queue, job.kind)

    def run(self) -> None:
        """Run until stopped by a signal or `stop()`; blocks. See the class docstring."""
        asyncio.run(self.run_async(handle_signals=True))

    def stop(self) -> None:
        """Request a graceful shutdown (drain); returns at once. Thread-safe; idempotent."""
        self._request("stop")

    def abort(self) -> None:
        """Request an immediate shutdown: running jobs are released at once. Thread-safe."""
        self._request("abort")

    def _request(self, what: str) -> None:
        loop = self._loop
        if loop is None:
            if self._early != "abort":
                self._early = what
            return
        action = self._begin_stop if what == "stop" else self._begin_abort
        if threading.get_ident() == self._loop_thread:
            action()
        else:
            with contextlib.suppress(RuntimeError):  # loop closed: already stopped
                loop.call_soon_threadsafe(action)

    async def run_async(self, *, handle_signals: bool = False) -> None:
        """Run in the current event loop until stopped; see the class docstring.

        `handle_signals`: install SIGTERM/SIGINT handlers (main thread only) for the duration.
        Raises PgqError when the worker already ran, NotMigrated when the schema is missing.
        """
        if self._started:
            raise PgqError("a Worker runs only once; build another one with app.worker()")
        self._started = True
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._init_state(loop)
        if self._early == "abort":
            self._begin_abort()
        elif self._early == "stop":
            self._begin_stop()
        dsn = cfg.dsn or self.app.dsn
        pgbouncer = self.app.pgbouncer if cfg.pgbouncer is None else cfg.pgbouncer
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=min(2, cfg.effective_pool_size), max_size=cfg.effective_pool_size,
            kwargs={**self.app.connect_kwargs, **pool_kwargs(pgbouncer)}, open=False,
            name=f"pgq-worker-{cfg.claimed_by}", timeout=5.0, configure=_ops.configure_connection_async,
        )
        await pool.open()
        # The queue keeps one connection out of the pool for the next call (while it is free), and its
        # cursor with it: an idle worker's claim then finds its loaders and dumpers ready (see SPARE_MAX_AGE).
        self._queue = AsyncQueue(pool, keep_connection=True)
        self.app._bind_async_queue(loop, self._queue)
        installed = self._install_signals(loop) if handle_signals else []
        background: list[asyncio.Task[Any]] = []
        listener: Listener | None = None
        try:
            if cfg.metrics_port is not None:
                self._start_metrics(dsn)
            logger.info("worker %s started: queues %s, concurrency %d, lease %g s", cfg.claimed_by,
                        ", ".join(cfg.queues) if cfg.queues else "(all)", cfg.concurrency, cfg.lease,
                        extra={"event": "worker_start", "worker": cfg.claimed_by})
            background.append(self._spawn(self._flush_loop(), "flusher"))
            background.append(self._spawn(self._heartbeat_loop(), "heartbeat"))
            if cfg.listen and pgbouncer and cfg.listen_dsn is None:
                logger.info("worker %s: behind PgBouncer (transaction pooling) with no listen_dsn: no LISTEN, "
                            "polling every %g s", cfg.claimed_by, cfg.poll_interval,
                            extra={"event": "worker_poll_only", "worker": cfg.claimed_by})
            elif cfg.listen:
                listener = Listener(cfg.listen_dsn or dsn, on_notify=self._on_notify, on_connect=self._on_listen,
                                    connect_kwargs=self.app.connect_kwargs)
                self._watch(listener)
                background.append(self._spawn(listener.run(), "listener"))
            if cfg.maintenance:
                maintenance = Maintenance(self._queue, self.app.periodic_tasks,
                                          rescue_interval=cfg.effective_rescue_interval,
                                          retention=cfg.retention, retention_interval=cfg.retention_interval,
                                          metrics=self.metrics, stalled_after=cfg.lease / 2)
                background.append(self._spawn(maintenance.run(), "maintenance"))
            producer = self._spawn(self._produce(), "producer")
            background.append(producer)
            await self._stopping.wait()
            await self._shutdown(producer)
        finally:
            for run in self._running.values():  # only left when run_async itself was cancelled
                if run.task is not None:
                    run.task.cancel()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            for sig in installed:
                loop.remove_signal_handler(sig)
            self.app._bind_async_queue(loop, None)
            self._threads.shutdown()
            if self._metrics_server is not None:
                await asyncio.to_thread(self._metrics_server.stop)
            await self._queue.close()  # gives the kept connection back; the pool is closed next
            await pool.close(timeout=2.0)
            logger.info("worker %s stopped: %s", cfg.claimed_by,
                        ", ".join(f"{k} {v}" for k, v in self._counts.items()),
                        extra={"event": "worker_stop", "worker": cfg.claimed_by, **self._counts})
        if self._fatal is not None:
            raise self._fatal

    def _start_metrics(self, dsn: str) -> None:
        cfg = self.config
        assert cfg.metrics_port is not None
        self._watch(None)
        reader = BacklogReader(dsn, queues=cfg.queues, connect_kwargs=self.app.connect_kwargs)
        self._metrics_server = MetricsServer(self.metrics, cfg.metrics_host, cfg.metrics_port, reader)
        self._metrics_server.start()  # PgqError when the port is taken: the worker does not start
        host, port = self._metrics_server.address
        logger.info("serving metrics at http://%s:%d/metrics", host, port, extra={"event": "metrics_start"})

    def _watch(self, listener: Listener | None) -> None:
        self.metrics.watch(running=lambda: len(self._running), prefetched=lambda: len(self._held),
                           listen_connected=lambda: listener.connected if listener is not None else None,
                           listen_reconnects=lambda: listener.reconnects if listener is not None else 0)

    # -- state ---------------------------------------------------------------------------------------

    def _init_state(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.config
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._stopping = asyncio.Event()
        self._aborting = asyncio.Event()
        self._stop_at = 0.0
        self._fatal: BaseException | None = None
        self._wake = asyncio.Event()  # the producer may have something to do
        self._run_ended = asyncio.Event()  # a job's run ended while stopping (shutdown waits for these)
        self._ready = True  # jobs may be ready: the last claim was full, a NOTIFY came, or a timer fired
        self._ready_gen = 0  # bumped by every NOTIFY and timer: a claim that raced one keeps _ready
        self._poll_at = 0.0  # monotonic time of the next fallback poll
        self._claiming = 0  # slots reserved by claims in flight
        self._claim_tasks: set[asyncio.Task[None]] = set()
        self._producing = False  # set up and claiming (the producer runs)
        self._claims = 0  # claims in flight (counted by the claims themselves, not by task callbacks)
        self._claim_failures = 0
        self._claim_pause_until = 0.0  # backoff after a failed claim
        self._unclaimable = 0  # claims in a row that found due jobs but could take none of them
        self._running: dict[int, _Running] = {}
        self._inflight: dict[int, Claim] = {}  # claimed and not yet acknowledged (heartbeat these)
        self._held: collections.deque[tuple[Claim, float]] = collections.deque()  # prefetched, not started
        self._prefetch = cfg.concurrency if cfg.prefetch is None else cfg.prefetch
        self._rate_since = 0.0  # adaptive prefetch: jobs started since then (0: no job started yet)
        self._rate_started = 0
        self._rate_looked = False  # adaptive prefetch: the first look at the rate was taken
        self._mean_run = 0.0  # adaptive prefetch: moving mean of a job's time in its slot (0: none yet)
        self._mean_bytes = 0.0  # adaptive prefetch: moving mean of a claimed job's payload bytes (0: none yet)
        self._acking: set[int] = set()  # in a flush being sent right now
        self._uncertain: set[int] = set()  # in a flush whose outcome a connection error hid
        self._abandoned = 0  # sync handlers abandoned after a timeout, still holding their thread
        self._acks = _Acks()
        self._ack_first_at = 0.0
        self._ack_event = asyncio.Event()
        self._ack_full = asyncio.Event()
        self._acks_idle = asyncio.Event()  # nothing pending, nothing being sent
        self._acks_idle.set()
        self._flush_now = False
        self._threads = _Threads(loop, cfg.concurrency, f"pgq-{cfg.claimed_by}")
        self._queues = list(cfg.queues) if cfg.queues is not None else None
        self._queue_set = frozenset(cfg.queues) if cfg.queues is not None else None

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"pgq-{name}")
        task.add_done_callback(functools.partial(self._background_done, name))
        return task

    def _background_done(self, name: str, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if not isinstance(exc, NotMigrated):
            logger.critical("worker %s: %s task crashed; stopping", self.config.claimed_by, name, exc_info=exc,
                            extra={"event": "worker_crash"})
        if self._fatal is None:
            self._fatal = exc
        self._begin_abort()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            logger.warning("not in the main thread: SIGTERM/SIGINT handlers not installed")
            return []
        installed: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
            installed.append(sig)
        return installed

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if not self._stopping.is_set():
            logger.info("%s received: draining (up to %g s); send it again to abort", name,
                        self.config.drain_timeout, extra={"event": "worker_signal"})
            self._begin_stop()
        else:
            logger.warning("%s received again: aborting, releasing running jobs now", name,
                           extra={"event": "worker_signal"})
            self._begin_abort()

    def _begin_stop(self) -> None:
        if not self._stopping.is_set():
            self._stop_at = time.monotonic()
            self._stopping.set()
            self._wake.set()

    def _begin_abort(self) -> None:
        self._begin_stop()
        self._aborting.set()

    def _on_notify(self, payload: str) -> None:
        if self._queue_set is None or payload == "*" or payload in self._queue_set:
            self._ready = True
            self._ready_gen += 1
            if self._producing and not self._claims:
                self._claim_if_due(time.monotonic())
            self._wake.set()

    def _on_listen(self) -> None:
        # (Re)connected: notifications sent meanwhile are lost, so look now.
        self._ready = True
        self._ready_gen += 1
        self._wake.set()

    def _free_slots(self) -> int:
        """Jobs a claim may ask for: free slots plus free room in the prefetch buffer."""
        return self.config.concurrency + self._prefetch - len(self._running) - self._abandoned - len(self._held)

    def _acks_hold_claims(self) -> bool:
        """Whether so many finished jobs await their acknowledgement that claims pause: a worker
        whose acknowledgements do not get through stops taking work it could not report, and a
        crash re-runs at most that many jobs that had in fact finished.

        The bound is at least twice the concurrency and `ack_batch`, and otherwise two prefetch
        buffers: the adaptive buffer holds about PREFETCH_HORIZON seconds of work, so this is about
        twice that. A fixed bound of 1,000 paused claims of fast jobs for 8-11 % of a drain: one
        acknowledgement statement of several hundred jobs in flight while the next thousand
        finished. A finished job keeps its payload until it is acknowledged, so for big payloads
        `ack_batch` counts only up to twice the jobs PREFETCH_MAX_BYTES allows the buffer."""
        cfg = self.config
        finished = len(self._inflight) - len(self._running) - len(self._held)  # claimed, not held or running
        return finished >= max(2 * cfg.concurrency, 2 * self._prefetch, min(cfg.ack_batch, 2 * self._prefetch_most()))

    def _slot_freed(self) -> None:
        self._start_held()
        if self._ready:
            self._wake.set()

    def _start_held(self) -> None:
        """Start prefetched jobs while slots are free (not once shutdown began: they are released)."""
        while self._held and not self._stopping.is_set() and (
            len(self._running) + self._abandoned < self.config.concurrency
        ):
            claim, claimed_at = self._held.popleft()
            self._start(claim, claimed_at)

    def _wake_at(self, delay: float) -> None:
        """Make the producer look again `delay` seconds from now (a retry or snooze comes due)."""
        at = time.monotonic() + max(delay, 0.0) + 0.005
        if at < self._poll_at:
            self._poll_at = at
            self._wake.set()  # a sleeping producer recomputes its timeout

    # -- producer ------------------------------------------------------------------------------------

    async def _produce(self) -> None:
        cfg = self.config
        await self._setup()
        self._producing = True
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if now >= self._poll_at:
                    self._ready = True
                    self._ready_gen += 1
                    # Fire once: the claim this starts sets an earlier time if it has reason to.
                    self._poll_at = now + cfg.poll_interval * random.uniform(0.8, 1.2)
                if self._claim_if_due(now):
                    continue
                # Nothing to do now. When jobs may be ready (so only slots, claims in flight or the
                # ack backlog are in the way) a freed slot, a finished claim or a flushed backlog
                # wakes us; the poll interval bounds the wait all the same.
                self._wake.clear()
                timeout = cfg.poll_interval if self._ready else self._poll_at - now
                if now < self._claim_pause_until:
                    timeout = self._claim_pause_until - now
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
        finally:
            self._producing = False
            if self._claim_tasks:  # let them land: when stopping, their jobs are handed straight back
                await asyncio.gather(*self._claim_tasks, return_exceptions=True)

    def _claim_if_due(self, now: float) -> bool:
        """Start a claim if one is due now; say whether it did. The producer's one decision, also
        taken straight from a NOTIFY when the worker is idle (which spares the wake-up latency a
        detour through the producer task)."""
        cfg = self.config
        if not self._ready or self._stopping.is_set():
            return False
        free = self._free_slots() - self._claiming
        # Claim at once when a slot would otherwise sit idle; else once a quarter of the prefetch
        # buffer is gone, so that claims stay big (one round trip for many jobs) instead of
        # degenerating into one per finished job, while the three quarters left keep the handlers
        # busy for longer than the claim takes (a claim costs the database about as much per job as
        # a no-op job costs the worker: at half, the buffer often ran dry before the claim was
        # back). A claim in flight already asks for every slot free when it started; another may
        # overlap it (claims are bound by round trips, not by the database), but only for a
        # worthwhile batch.
        idle = cfg.concurrency - len(self._running) - self._abandoned - len(self._held) - self._claiming
        batch = max(1, self._prefetch // 4)
        wanted = (1 if idle > 0 else batch) if not self._claims else max(batch, cfg.concurrency // 4)
        if (free >= wanted and self._claims < cfg.claims_in_flight and now >= self._claim_pause_until
                and not self._acks_hold_claims()):
            self._claiming += free
            self._claims += 1
            task = asyncio.get_running_loop().create_task(self._claim(free))
            self._claim_tasks.add(task)
            task.add_done_callback(self._claim_tasks.discard)
            return True
        return False

    async def _claim(self, limit: int) -> None:
        """One claim of up to `limit` jobs (the slots reserved for it); starts the jobs it gets."""
        cfg = self.config
        generation = self._ready_gen
        decoded = _ops.jsonb_bytes_decoded()
        try:
            claims = await self._queue._run(_ops.claim(
                worker=cfg.claimed_by, queues=self._queues, kinds=None, limit=limit, lease=cfg.lease))
        except NotMigrated as exc:
            self._fail_fatally(exc)
            return
        except psycopg.errors.InsufficientPrivilege as exc:
            # Without the right to claim, a worker can do nothing at all: stop with the reason.
            self._fail_fatally(PgqError(f"this worker's role may not claim jobs ({one_line(exc)}); "
                                        "grant it pgq_worker (see `pgq roles`)"))
            return
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            self._claim_failures += 1
            self._claim_pause_until = time.monotonic() + self._trouble("claim", self._claim_failures, exc)
            return
        except Exception:
            self._claim_failures += 1
            logger.exception("claim failed", extra={"event": "job_claim_error"})
            self._claim_pause_until = time.monotonic() + self._trouble("claim", self._claim_failures, None)
            return
        finally:
            self._claiming -= limit
            self._claims -= 1
            self._wake.set()
        if self._claim_failures:
            logger.info("database reachable again: claiming", extra={"event": "db_reconnected"})
            self._claim_failures = 0
        if claims:
            self._unclaimable = 0
            # Payload bytes per job of this claim (more if other decoding happened meanwhile: a claim
            # overlapping it, a handler reading jobs; the buffer then only gets smaller).
            size = (_ops.jsonb_bytes_decoded() - decoded) / len(claims)
            self._mean_bytes = size if self._mean_bytes == 0 else self._mean_bytes + 0.25 * (size - self._mean_bytes)
        if self._stopping.is_set():  # claimed while shutting down: hand them straight back
            for claim in claims:
                self._inflight[claim.id] = claim
                self._ack_snooze(claim, 0.0)
            return
        now = time.monotonic()
        for claim in claims:
            self._inflight[claim.job.id] = claim  # leased from now on: heartbeated, released at shutdown
            self._held.append((claim, now))
        self._start_held()
        self._adapt_prefetch(now)
        if len(claims) < limit and generation == self._ready_gen:
            # Nothing more is ready (unless a NOTIFY or a timer came meanwhile: the generation says).
            # Sleep until the next poll, or until the earliest scheduled job when that is sooner.
            self._ready = False
            # Let the handlers just started begin before this lookup (it only sets the next poll time):
            # a sync handler's thread needs the GIL, which this loop holds until it next waits, and
            # the lookup would keep it busy for a quarter of a millisecond on the critical path.
            await asyncio.sleep(HANDLER_HEAD_START)
            try:
                delay = await self._queue._run(_ops.next_run_at(self._queues))
            except (psycopg.OperationalError, psycopg.errors.QueryCanceled):
                delay = None
            poll = cfg.poll_interval * random.uniform(0.8, 1.2)
            if delay is not None and delay <= 0 and not claims:
                # Jobs are due, yet this claim got none: they are locked by other claims in flight, or
                # of kinds at their concurrency limit. Back off (50 ms, doubling up to the poll
                # interval) instead of asking again every few milliseconds until that changes.
                delay = 0.05 * 2.0 ** min(self._unclaimable, 10)
                self._unclaimable += 1
            at = time.monotonic() + (poll if delay is None else min(poll, max(delay, 0.0) + 0.005))
            if at < self._poll_at or self._poll_at <= now:
                self._poll_at = at
            self._wake.set()

    def _prefetch_most(self) -> int:
        """The most jobs the adaptive buffer may hold: PREFETCH_MAX, and no more than PREFETCH_MAX_BYTES
        of payload at the moving mean of the sizes claims brought; never less than the concurrency."""
        most = PREFETCH_MAX if self._mean_bytes <= 0 else min(PREFETCH_MAX, int(PREFETCH_MAX_BYTES / self._mean_bytes))
        return max(self.config.concurrency, most)

    def _adapt_prefetch(self, now: float) -> None:
        """Adaptive prefetch (`prefetch=None`): hold about PREFETCH_HORIZON seconds of work, judged by
        the rate jobs started at since the last look (the first once the slots have been refilled
        PREFETCH_FIRST_LOOK times, later ones every 50 ms; at most `concurrency` divided by the moving
        mean of a job's time in its slot; no growth before a job has left its slot), never less than
        `concurrency` nor more than `max(concurrency, PREFETCH_MAX)`, and no more jobs than
        PREFETCH_MAX_BYTES of payload at the mean size claims brought (applied at every claim, not only
        at a look: a switch to big payloads shrinks the buffer at once). Fast jobs get big claims (few
        round trips per job); slow jobs keep the buffer small, so that other workers are not starved
        of a shallow queue; big payloads keep it small enough for the worker's memory."""
        cfg = self.config
        if cfg.prefetch is not None:
            return
        most = self._prefetch_most()
        self._prefetch = min(self._prefetch, most)
        started = self._counts["claimed"]
        if self._rate_since == 0.0:
            # The first window opens once the first claim has filled the slots: the time to start up
            # and connect is not part of the rate, nor are these starts (they fill empty slots).
            if started:
                self._rate_since, self._rate_started = now, started
            return
        elapsed = now - self._rate_since
        if elapsed < 0.05 and (self._rate_looked
                               or started - self._rate_started < PREFETCH_FIRST_LOOK * cfg.concurrency):
            # A look every 50 ms at most, or the rate of a short window is noise. The first look
            # comes sooner, once the slots have been refilled a few times: until then a fast drain
            # claims `concurrency` jobs per round trip, at a third of its rate once the buffer grew.
            return
        if self._mean_run == 0:
            # No job has left its slot yet: the starts so far only filled empty slots, which says
            # nothing of the rate slots free up at (a worker with 2 slots and 0.2 s jobs saw "33 jobs
            # a second" 60 ms after starting and held 8). Stay at the floor until one has; fast jobs
            # finish long before the first look is due.
            return
        rate = (started - self._rate_started) / elapsed
        self._rate_since, self._rate_started, self._rate_looked = now, started, True
        # No more jobs can start per second than slots free up: concurrency / time in a slot. For
        # slow jobs (that bound keeps the buffer under twice the concurrency) it caps the rate: a
        # short window that caught a burst of starts, slots freed together, would otherwise pass for
        # the rate and over-fetch a shallow queue. For fast jobs both figures are large and the
        # bound, a noisier estimate of the same rate, would only shrink the claims.
        bound = cfg.concurrency / self._mean_run
        if bound * PREFETCH_HORIZON < 2 * cfg.concurrency:
            rate = min(rate, bound)
        self._prefetch = max(cfg.concurrency, min(int(rate * PREFETCH_HORIZON), most))

    def _fail_fatally(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._begin_abort()

    async def _setup(self) -> None:
        # Concurrency limits of this app's tasks, set before the first claim; retried until it works.
        limits = [(t.name, t.concurrency_limit) for t in self._tasks.values() if t.concurrency_limit is not None]
        failures = 0
        while limits and not self._stopping.is_set():
            try:
                for kind, limit in limits:
                    try:
                        await self._queue.set_concurrency_limit(kind, limit)
                    except psycopg.errors.InsufficientPrivilege as exc:
                        # A role without the right (granted to pgq_worker) still runs jobs: the limit
                        # the database holds, if any, is the one claims obey.
                        logger.warning("cannot set the concurrency limit of task %s to %d: %s; claims obey "
                                       "the limit stored in the database, if any", kind, limit, one_line(exc),
                                       extra={"event": "concurrency_limit_refused", "kind": kind})
                return
            except NotMigrated:
                raise
            except psycopg.OperationalError as exc:
                failures += 1
                await self._backoff("setup", failures, exc)

    def _trouble(self, what: str, failures: int, exc: BaseException | None) -> float:
        """Log a database problem during `what` (quietly after the first few); return the backoff."""
        delay: float = min(0.1 * 2.0 ** min(failures, 10), 5.0) * random.uniform(0.5, 1.0)
        if exc is not None:
            level = logging.WARNING if failures <= 3 or failures % 20 == 0 else logging.DEBUG
            logger.log(level, "database unavailable during %s (%s); retrying in %.2f s", what, one_line(exc), delay,
                       extra={"event": "db_unavailable", "step": what, "failures": failures})
        return delay

    async def _backoff(self, what: str, failures: int, exc: BaseException | None) -> None:
        delay = self._trouble(what, failures, exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stopping.wait()

    def _start(self, claim: Claim, claimed_at: float) -> None:
        job = claim.job
        self._count("claimed", job)
        run = _Running(claim, claimed_at)
        self._running[job.id] = run
        task = self._tasks.get(job.kind)
        if task is not None and not task.is_async and task.timeout is None:
            # A sync handler that needs no timeout: straight to a thread, its outcome handled by a
            # callback on the loop. No task or future per job, which for short handlers is a good
            # part of the worker's own CPU time per job.
            try:
                kwargs = task.check_arguments(job.payload)
            except InvalidJob:
                pass  # _execute rejects it, with the reason
            else:
                self._log_start(job)
                run.started = time.monotonic()
                self._threads.call(_sync_call(task, kwargs, run), functools.partial(self._sync_done, run, task))
                return
        run.task = asyncio.get_running_loop().create_task(self._execute(run))

    # -- running one job -----------------------------------------------------------------------------

    def _log_start(self, job: Job) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("job %d %s attempt %d/%d: started", job.id, job.kind, job.attempts, job.max_attempts,
                        extra=_job_extra(job, "job_start"))

    async def _execute(self, run: _Running) -> None:
        claim = run.claim
        job = claim.job
        task = self._tasks.get(job.kind)
        self._log_start(job)
        run.started = time.monotonic()
        outcome, error = "released", None
        try:
            value: Any = None
            failure: BaseException | None = None
            try:
                if task is None:
                    known = ", ".join(sorted(self._tasks)) or "none"
                    raise _Rejected(f"unknown task kind {job.kind!r}: no task of that name is registered in "
                                    f"this worker's app (known: {known})")
                try:
                    kwargs = task.check_arguments(job.payload)
                except InvalidJob as exc:
                    raise _Rejected(str(exc)) from None
                value = await self._call(task, kwargs, run)
            except asyncio.CancelledError as exc:
                current = asyncio.current_task()
                if run.released or (current is not None and current.cancelling()):
                    raise
                failure = exc  # raised by the handler itself: a failure like any other
            except BaseException as exc:  # SystemExit, KeyboardInterrupt from a handler: still just a failure
                failure = exc
            outcome, error = self._conclude(claim, task, value, failure)
        finally:
            self._end_run(run, outcome, error)

    def _sync_done(self, run: _Running, task: Task, value: Any, failure: BaseException | None) -> None:
        # On the loop, once a sync handler started by _start returned or raised.
        if run.released:  # handed back at shutdown while it ran (and reported then)
            return
        outcome, error = "released", None
        try:
            outcome, error = self._conclude(run.claim, task, value, failure)
        finally:
            self._end_run(run, outcome, error)

    def _conclude(self, claim: Claim, task: Task | None, value: Any,
                  failure: BaseException | None) -> tuple[str, str | None]:
        """Queue the acknowledgement of an attempt that returned `value` or raised `failure`; return
        its outcome and, for a failure, the error summary."""
        if failure is None and isinstance(value, Snooze):
            failure = value
        if failure is None and value is not None:
            try:
                encode_json("result", value, None)
            except InvalidJob as exc:
                assert task is not None
                failure = _Rejected(f"task {task.name!r} returned a value that cannot be stored as its "
                                    f"result: {exc}")
        if failure is None:
            self._ack_complete(claim, value)
            return "succeeded", None
        if isinstance(failure, Snooze):
            self._ack_snooze(claim, failure.delay)
            return "snoozed", None
        if isinstance(failure, asyncio.CancelledError):  # from the handler, not a cancellation of ours
            failure = RuntimeError("the handler raised CancelledError")
        return self._ack_failure(claim, task, failure)

    def _end_run(self, run: _Running, outcome: str, error: str | None) -> None:
        job = run.claim.job
        if self._running.get(job.id) is run:
            del self._running[job.id]
        seconds = time.monotonic() - run.started
        if run.started:
            self._mean_run = seconds if self._mean_run == 0 else self._mean_run + (seconds - self._mean_run) / 8
        self._slot_freed()
        self._log_finish(job, outcome, seconds, error)
        if self._stopping.is_set():
            self._run_ended.set()

    async def _call(self, task: Task, kwargs: dict[str, Any], run: _Running) -> Any:
        if not task.is_async:  # with a timeout (_start runs the others): awaited, abandoned when late
            future = self._threads.submit(_sync_call(task, kwargs, run))
            done, _ = await asyncio.wait({future}, timeout=task.timeout)
            if not done:
                self._abandon(run, future)
                raise _HandlerTimeout(task.timeout)
            return future.result()
        token = _current.set(_job_context(run.claim, run.claimed_at))
        try:
            if task.timeout is None:
                return await task.func(**kwargs)
            try:
                async with asyncio.timeout(task.timeout) as scope:
                    return await task.func(**kwargs)
            except TimeoutError:
                if scope.expired():
                    raise _HandlerTimeout(task.timeout) from None
                raise
        finally:
            _current.reset(token)

    def _abandon(self, run: _Running, future: asyncio.Future[Any]) -> None:
        # A sync handler cannot be interrupted: its thread runs on, so its slot stays taken until it
        # returns (the job itself is failed now, and its late result is dropped).
        self._abandoned += 1
        job = run.claim.job
        logger.warning("job %d %s: sync handler abandoned after its timeout; its thread keeps a slot until "
                       "it returns", job.id, job.kind, extra=_job_extra(job, "job_abandon"))

        def returned(late: asyncio.Future[Any]) -> None:
            _retrieve(late)  # nobody awaits it any more: no "exception was never retrieved" noise
            self._abandoned -= 1
            self._slot_freed()

        future.add_done_callback(returned)

    def _ack_failure(self, claim: Claim, task: Task | None, exc: BaseException) -> tuple[str, str]:
        job = claim.job
        final = isinstance(exc, _Rejected | PermanentFailure)
        if isinstance(exc, _HandlerTimeout):
            summary = f"timeout: task {job.kind!r} ran longer than its timeout of {exc.args[0]:g} s"
            error = summary
        elif isinstance(exc, _Rejected):
            summary = error = str(exc)
        else:
            summary = f"{type(exc).__name__}: {exc}"
            error = summary + "\n\n" + "".join(traceback.format_exception(exc))
        retry_in: float | None = None
        if not final and task is not None and job.attempts < job.max_attempts:
            try:
                answer = task.retry.retry_in(job.attempts, exc)
            except Exception:
                logger.exception("job %d %s: retry policy failed; using the default backoff", job.id, job.kind)
                answer = None
            else:
                if answer is None:
                    final = True
                else:
                    retry_in = max(float(answer), 0.0)
        final = final or job.attempts >= job.max_attempts
        self._ack_fail(claim, _clip(error), retry_in, final)
        return ("failed" if final else "retry"), summary

    def _log_finish(self, job: Job, outcome: str, seconds: float, error: str | None) -> None:
        if outcome != "released":
            self.metrics.job_duration(job.queue, job.kind, seconds)
        level = _FINISH_LEVELS.get(outcome, logging.ERROR)
        if not logger.isEnabledFor(level):
            return
        extra = _job_extra(job, "job_finish")
        extra.update(outcome=outcome, duration_ms=round(seconds * 1000, 3))
        if error is None:
            logger.log(level, "job %d %s attempt %d/%d: %s (%.1f ms)", job.id, job.kind, job.attempts,
                       job.max_attempts, outcome, seconds * 1000, extra=extra)
        else:
            extra["error"] = error
            logger.log(level, "job %d %s attempt %d/%d: %s (%.1f ms): %s", job.id, job.kind, job.attempts,
                       job.max_attempts, outcome, seconds * 1000, _clip(error, 500), extra=extra)

    # -- acknowledgements ----------------------------------------------------------------------------

    def _pending(self) -> None:
        if not self._ack_event.is_set():
            self._ack_first_at = time.monotonic()
            self._ack_event.set()
            self._acks_idle.clear()
        if len(self._acks) >= self.config.ack_batch:
            self._ack_full.set()

    def _ack_complete(self, claim: Claim, result: JSON) -> None:
        self._acks.completes.append((claim, result))
        self._pending()

    def _ack_fail(self, claim: Claim, error: str, retry_in: float | None, final: bool) -> None:
        self._acks.fails.append((claim, error, retry_in, final))
        self._pending()

    def _ack_snooze(self, claim: Claim, delay: float) -> None:
        self._acks.snoozes.append((claim, delay))
        self._pending()

    async def _flush_loop(self) -> None:
        cfg = self.config
        failures = 0
        while True:
            await self._ack_event.wait()
            wait = self._ack_first_at + cfg.ack_delay - time.monotonic()
            if wait > 0 and not self._flush_now and not self._ack_full.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._ack_full.wait()
            batch, self._acks = self._acks, _Acks()
            self._ack_event.clear()
            self._ack_full.clear()
            unsent = await self._send(batch)
            if len(unsent):
                failures += 1
                # Put them back in front of whatever arrived meanwhile and try again after a pause.
                self._acks.completes[:0] = unsent.completes
                self._acks.fails[:0] = unsent.fails
                self._acks.snoozes[:0] = unsent.snoozes
                self._pending()
                delay = min(0.05 * 2 ** min(failures, 10), 2.0) * random.uniform(0.5, 1.0)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._aborting.wait()
                continue
            failures = 0
            if not self._ack_event.is_set():
                self._acks_idle.set()
                if not self._acks_hold_claims():
                    self._slot_freed()  # claims may have waited for this backlog to clear

    async def _ack(self, op: _ops.Operation[AckT], items: Sequence[tuple[Any, ...]]) -> AckT | None:
        """Run one acknowledgement statement; on a connection error report it and return None (the
        caller keeps `items` to send again: every acknowledgement is fenced, so resending is safe)."""
        try:
            return await self._queue._run(op)
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            self._ack_error(exc, items)
            return None

    async def _send(self, batch: _Acks) -> _Acks:
        """Send a batch (one statement per kind of outcome); return what could not be sent."""
        ids = [c.job.id for c in batch.claims()]
        self._acking.update(ids)
        unsent = _Acks()
        try:
            if batch.completes:
                done = await self._ack(_ops.complete([(c, r, None) for c, r in batch.completes], raise_lost=False),
                                       batch.completes)
                if done is None:
                    unsent.completes = batch.completes
                else:
                    for claim, _ in batch.completes:
                        status = done.get(claim.job.id)
                        if status is not None:
                            self._count("succeeded" if status == JobStatus.SUCCEEDED else "retried", claim.job)
                        self._settled(claim, status is not None, "complete")
            if batch.fails:
                failed = await self._ack(_ops.fail(batch.fails, raise_lost=False), batch.fails)
                if failed is None:
                    unsent.fails = batch.fails
                else:
                    for claim, _, retry_in, _ in batch.fails:
                        job = failed.get(claim.id)
                        if job is not None:
                            if job.status == JobStatus.QUEUED:
                                self._count("retried", claim.job)
                                self._wake_at(retry_in if retry_in is not None else 1.0)
                            else:
                                self._count("failed", claim.job)
                        self._settled(claim, job is not None, "fail")
            if batch.snoozes:
                snoozed = await self._ack(_ops.snooze(batch.snoozes, raise_lost=False), batch.snoozes)
                if snoozed is None:
                    unsent.snoozes = batch.snoozes
                else:
                    for claim, delay in batch.snoozes:
                        ok = claim.id in snoozed
                        if ok:
                            self._count("snoozed" if delay > 0 or not self._stopping.is_set() else "released",
                                        claim.job)
                            self._wake_at(delay)
                        self._settled(claim, ok, "snooze")
        except Exception:
            # A bug, or bad data the database refused: never retried, never allowed to stop the
            # worker. Those jobs keep their leases until they expire and are rescued.
            logger.exception("acknowledging %d jobs failed; they will be rescued after their lease", len(ids),
                             extra={"event": "ack_error"})
            unsent_ids = {c.id for c in unsent.claims()}
            for claim in batch.claims():
                if claim.id not in unsent_ids:
                    self._inflight.pop(claim.id, None)
        finally:
            self._acking.difference_update(ids)
        return unsent

    def _ack_error(self, exc: BaseException, items: Sequence[tuple[Any, ...]]) -> None:
        for item in items:
            self._uncertain.add(item[0].id)
        logger.warning("could not acknowledge %d jobs (%s); retrying", len(items), one_line(exc),
                       extra={"event": "ack_retry"})

    def _settled(self, claim: Claim, ok: bool, operation: str) -> None:
        # Once per acknowledged job: the id read once (Claim.id is a property), the set of uncertain
        # ids (almost always empty) only looked at when it holds any.
        job = claim.job
        job_id = job.id
        if self._inflight.get(job_id) is claim:
            del self._inflight[job_id]
        uncertain = False
        if self._uncertain:
            uncertain = job_id in self._uncertain
            self._uncertain.discard(job_id)
        if ok:
            return
        if uncertain:  # an earlier try may have gone through before the connection failed
            logger.info("job %d %s: %s not applied: acknowledged before a connection error, or lease lost",
                        job.id, job.kind, operation, extra=_job_extra(job, "lease_lost"))
            return
        self._count("lost", job)
        logger.warning("job %d %s: %s refused: lease lost (rescued after lease expiry, cancelled, or "
                       "finished elsewhere)", job.id, job.kind, operation, extra=_job_extra(job, "lease_lost"))

    # -- heartbeat -----------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        cfg = self.config
        interval = cfg.lease / 3
        while True:
            await asyncio.sleep(interval)
            claims = [c for i, c in self._inflight.items() if i not in self._acking]
            if not claims:
                continue
            try:
                renewed = await self._queue._run(_ops.heartbeat([(c, cfg.lease) for c in claims], raise_lost=False))
            except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
                logger.warning("heartbeat of %d jobs failed (%s); retrying", len(claims), one_line(exc),
                               extra={"event": "heartbeat_error"})
                interval = min(cfg.lease / 3, 1.0)
                continue
            except Exception:
                logger.exception("heartbeat failed", extra={"event": "heartbeat_error"})
                interval = cfg.lease / 3
                continue
            interval = cfg.lease / 3
            for claim in claims:
                # Lost only if still ours and not acknowledged meanwhile (an ack racing the heartbeat
                # also makes the row "not running under this token").
                if (claim.id not in renewed and self._inflight.get(claim.id) is claim
                        and claim.id not in self._acking and claim.id in self._running):
                    job = claim.job
                    logger.warning("job %d %s: lease lost while running (rescued, cancelled or finished "
                                   "elsewhere); its result will be refused", job.id, job.kind,
                                   extra=_job_extra(job, "lease_lost"))

    # -- shutdown ------------------------------------------------------------------------------------

    async def _shutdown(self, producer: asyncio.Task[None]) -> None:
        cfg = self.config
        # 1. Stop claiming. A claim in flight may finish (its jobs are handed back); do not wait long.
        done, _ = await asyncio.wait({producer}, timeout=2.0)
        if not done:
            producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        # Prefetched jobs never started: straight back to the queue.
        while self._held:
            claim, _ = self._held.popleft()
            self._ack_snooze(claim, 0.0)
        # 2. Let running jobs finish, until the drain timeout or an abort.
        if self._running and not self._aborting.is_set():
            logger.info("waiting up to %g s for %d running jobs", cfg.drain_timeout, len(self._running),
                        extra={"event": "worker_drain", "running": len(self._running)})
        abort_wait = asyncio.ensure_future(self._aborting.wait())
        try:
            while self._running and not self._aborting.is_set():
                remaining = self._stop_at + cfg.drain_timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._run_ended.clear()
                ended = asyncio.ensure_future(self._run_ended.wait())
                try:
                    await asyncio.wait({ended, abort_wait}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ended.cancel()
        finally:
            abort_wait.cancel()
        # 3. Hand the unfinished ones back to the queue, at once and without spending an attempt.
        leftover = list(self._running.values())
        if leftover:
            for run in leftover:
                run.released = True
                self._ack_snooze(run.claim, 0.0)
                if run.task is not None:
                    run.task.cancel()
                else:  # a sync handler's thread cannot be stopped: its outcome will be ignored
                    self._end_run(run, "released", None)
            logger.warning("releasing %d unfinished jobs back to their queues: %s", len(leftover),
                           ", ".join(str(r.claim.id) for r in leftover[:20]) + (" ..." if len(leftover) > 20 else ""),
                           extra={"event": "worker_release", "count": len(leftover)})
            cancelled = {r.task for r in leftover if r.task is not None}
            if cancelled:
                await asyncio.wait(cancelled, timeout=1.0)
        # 4. Send the last acknowledgements and releases.
        self._flush_now = True
        if len(self._acks):
            self._ack_event.set()
        grace = 2.0 if self._aborting.is_set() else cfg.shutdown_timeout
        try:
            async with asyncio.timeout(grace):
                await self._acks_idle.wait()
        except TimeoutError:
            ids = sorted(c.id for c in self._acks.claims())
            logger.error("could not acknowledge %d jobs before exiting (database unreachable?); they will "
                         "be rescued after their lease: %s", len(ids), ids[:50],
                         extra={"event": "ack_abandoned", "count": len(ids)})


_FINISH_LEVELS: Final = {"succeeded": logging.DEBUG, "snoozed": logging.DEBUG, "retry": logging.WARNING,
                         "released": logging.WARNING}
"""Log level of a job's finish line by outcome (any other outcome: a failure, ERROR)."""


def _sync_call(task: Task, kwargs: dict[str, Any], run: _Running) -> Callable[[], Any]:
    """A sync handler's call, for a thread: in a copy of the current context in which
    `current_job()` is this run's job."""
    context = contextvars.copy_context()
    context.run(_current.set, _job_context(run.claim, run.claimed_at))
    return functools.partial(context.run, task.func, **kwargs)


def _job_extra(job: Job, event: str) -> dict[str, Any]:
    return {"event": event, "job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempts}


def _clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters cut) ...\n{text[-half:]}"


