"""`Worker`: runs the tasks of an App; owns the parts of the worker and their lifetime.

A run builds its parts around one `WorkerState`: the `Producer` (claims), the `Runner` (handlers in
slots), the `Acknowledger` (batched, fenced acknowledgements), the `Heartbeat` (leases), the LISTEN
connection (`pgq.listener.Listener`, wakes the producer), `Maintenance` (rescue, periodic enqueue,
retention) and the metrics server; then it waits for a stop and runs `shut_down`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import signal
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from .. import _ops
from ..app import App
from ..client import AsyncQueue, pool_kwargs
from ..errors import InvalidJob, NotMigrated, PgqError
from ..listener import Listener
from ..metrics import BacklogReader, Metrics, MetricsServer
from .acks import Acknowledger
from .config import WorkerConfig
from .leases import Heartbeat
from .maintenance import Maintenance
from .producer import Producer
from .registry import Registry
from .runner import Runner
from .shutdown import shut_down
from .state import COUNTERS, ProcessTracer, WorkerState
from .threads import Threads

__all__ = ["Worker", "queue_warnings"]

logger = logging.getLogger("pgq.worker")


class Worker:
    """Runs the tasks of an App: claims their jobs, runs their handlers, acknowledges the outcomes,
    keeps the leases alive, takes part in maintenance, and drains on shutdown.

    `Worker(app, queues=["emails"], concurrency=8)`: settings as keywords (see `WorkerConfig`;
    timedeltas are accepted), or a ready `WorkerConfig` as `config`, not both. Raises InvalidJob for
    invalid settings; nothing connects until the worker runs.

    `run()` blocks until the worker has shut down; `await run_async()` does the same inside a running
    loop. Both handle SIGTERM and SIGINT (in the main thread): the first signal drains, a second
    aborts; `run_async` leaves alone a signal the host application handles itself (see its
    `handle_signals`). A Worker runs
    once. `stop()` and `abort()` may be called from any thread, before or while it runs. The worker
    owns its connection pool and LISTEN connection and closes both. `run_async` raises NotMigrated
    when the database has no pgq schema; database outages are survived, never raised.
    """

    def __init__(self, app: App, config: WorkerConfig | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise InvalidJob("give the worker's settings either as a WorkerConfig or as keywords, not both")
        self.app = app
        self.config = config if config is not None else WorkerConfig.build(**settings)
        for p in app.periodic_tasks:
            if self.config.maintenance and self.config.retention is not None and p.catch_up >= self.config.retention:
                raise InvalidJob(
                    f"periodic {p.name!r}: catch_up ({p.catch_up:g} s) must be shorter than the worker's "
                    f"retention ({self.config.retention:g} s)"
                )
        self._started = False
        self._early: str | None = None  # "stop" or "abort" requested before run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._state: WorkerState | None = None
        self._fatal: BaseException | None = None
        self._counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.metrics = Metrics(self.config.claimed_by, queues=self.config.queues,
                               concurrency=self.config.concurrency)
        """The worker's Prometheus metrics (served when `metrics_port` is set; `render()` them anywhere)."""
        self._metrics_server: MetricsServer | None = None

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
        loop, state = self._loop, self._state
        if loop is None or state is None:
            if self._early != "abort":
                self._early = what
            return
        action = state.begin_stop if what == "stop" else state.begin_abort
        if threading.get_ident() == self._loop_thread:
            action()
        else:
            with contextlib.suppress(RuntimeError):  # loop closed: already stopped
                loop.call_soon_threadsafe(action)

    async def run_async(self, *, handle_signals: bool | None = None) -> None:
        """Run in the current event loop until stopped; see the class docstring.

        `handle_signals`: whether SIGTERM and SIGINT drain the worker (first signal) and abort it
        (second) while it runs, through the loop's signal handlers (main thread only).
        None (the default): yes for each of the two signals that nobody else handles yet (Python's
        defaults, or asyncio.run's Ctrl-C handling), no for one the host application handles or
        ignores (then call `stop()` from its shutdown). True: always (as `run()` does). False: never.
        Several workers in one loop all drain on the same signal. Raises PgqError when the worker
        already ran, NotMigrated when the schema is missing.
        """
        if self._started:
            raise PgqError("a Worker runs only once; build another one")
        self._started = True
        cfg = self.config
        loop = asyncio.get_running_loop()
        dsn = cfg.dsn or self.app.dsn
        pgbouncer = self.app.pgbouncer if cfg.pgbouncer is None else cfg.pgbouncer
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=min(2, cfg.effective_pool_size), max_size=cfg.effective_pool_size,
            kwargs={**self._connect_kwargs(dsn), **pool_kwargs(pgbouncer)}, open=False,
            name=f"pgq-worker-{cfg.claimed_by}", timeout=5.0, configure=_ops.configure_connection_async,
        )
        # The queue keeps one connection out of the pool for the next call (while it is free), and its
        # cursor with it: an idle worker's claim then finds its loaders and dumpers ready.
        queue = AsyncQueue(pool, keep_connection=True, io_timeout=cfg.effective_io_timeout, app=self.app)
        threads = Threads(loop, cfg.concurrency, f"pgq-{cfg.claimed_by}")
        state = self._begin(loop)
        acks = Acknowledger(state, queue)
        tracer: ProcessTracer | None = getattr(self.app, "_otel", None)  # pgq.otel.instrument(app)
        runner = Runner(state, self.app.tasks, threads, acks, queue, tracer)
        state.start = runner.start
        producer = Producer(state, queue, acks, self.app.tasks, self._fail_fatally, traced=tracer is not None)
        await pool.open()
        registry = Registry(queue, claimed_by=cfg.claimed_by, queues=cfg.queues, kinds=self.app.tasks,
                            slots=cfg.concurrency, lease_s=cfg.lease,
                            interval=cfg.effective_rescue_interval if cfg.maintenance else cfg.lease / 2)
        self.app._bind_async_queue(loop, queue)
        installed = self._install_signals(loop, force=handle_signals is True) if handle_signals is not False else []
        background: list[asyncio.Task[Any]] = []
        try:
            listener = self._listener(producer, runner, dsn, pgbouncer)
            self._watch(state, listener)
            if cfg.metrics_port is not None:
                self._start_metrics(dsn)
            logger.info("worker %s started: queues %s, concurrency %d, lease %g s", cfg.claimed_by,
                        ", ".join(cfg.queues) if cfg.queues else "(all)", cfg.concurrency, cfg.lease,
                        extra={"event": "worker_start", "worker": cfg.claimed_by})
            for warning in queue_warnings(self.app, cfg.queues, periodic=cfg.maintenance):
                logger.warning(warning, extra={"event": "worker_queue_warning", "worker": cfg.claimed_by})
            background.append(self._spawn(registry.run(), "registry"))
            background.append(self._spawn(acks.run(), "flusher"))
            # Without LISTEN, cancellations are learnt by reading the leases every poll interval.
            heartbeat = Heartbeat(state, queue, acks, runner,
                                  check_every=None if listener is not None else cfg.poll_interval)
            background.append(self._spawn(heartbeat.run(), "heartbeat"))
            background.append(self._spawn(heartbeat.watch(), "lease-watch"))
            if listener is not None:
                background.append(self._spawn(listener.run(), "listener"))
            if cfg.maintenance:
                maintenance = Maintenance(queue, self.app.periodic_tasks,
                                          rescue_interval=cfg.effective_rescue_interval,
                                          retention=cfg.retention, retention_interval=cfg.retention_interval,
                                          metrics=self.metrics, stalled_after=cfg.lease / 2,
                                          tasks=self.app.tasks, registry=registry)
                background.append(self._spawn(maintenance.run(), "maintenance"))
            producing = self._spawn(producer.run(), "producer")
            background.append(producing)
            await state.stopping.wait()
            draining = self._spawn(registry.drain(), "registry-drain")
            await shut_down(state, producing, acks, runner)
            await asyncio.gather(draining, return_exceptions=True)
            await registry.unregister()
        finally:
            for run in state.running.values():  # only left when run_async itself was cancelled
                if run.task is not None:
                    run.task.cancel()
            for task in background:
                task.cancel()
            if background:  # bounded: a task that lost its cancellation must not hold the exit
                _, stuck = await asyncio.wait(background, timeout=10.0)
                for task in stuck:
                    logger.error("worker %s: task %s did not stop when cancelled; leaving it",
                                 cfg.claimed_by, task.get_name(), extra={"event": "worker_task_stuck"})
            _signal_workers_remove(loop, self, installed)
            self.app._bind_async_queue(loop, None)
            threads.shutdown()
            if self._metrics_server is not None:
                await asyncio.to_thread(self._metrics_server.stop)
            await queue.close()  # gives the kept connection back; the pool is closed next
            await pool.close(timeout=2.0)
            logger.info("worker %s stopped: %s", cfg.claimed_by,
                        ", ".join(f"{k} {v}" for k, v in self._counts.items()),
                        extra={"event": "worker_stop", "worker": cfg.claimed_by, **self._counts})
        if self._fatal is not None:
            raise self._fatal

    def _begin(self, loop: asyncio.AbstractEventLoop) -> WorkerState:
        """The state of this run, with a stop or abort requested before it applied."""
        state = WorkerState(self.config, self.metrics, self._counts, start=_not_ready)
        self._loop, self._loop_thread, self._state = loop, threading.get_ident(), state
        if self._early == "abort":
            state.begin_abort()
        elif self._early == "stop":
            state.begin_stop()
        return state

    def _listener(self, producer: Producer, runner: Runner, dsn: str, pgbouncer: bool) -> Listener | None:
        """The LISTEN connection that wakes the producer and reports cancelled jobs to the runner, or
        None when the worker polls only."""
        cfg = self.config
        if not cfg.listen:
            return None
        if pgbouncer and cfg.listen_dsn is None:
            logger.info("worker %s: behind PgBouncer (transaction pooling) with no listen_dsn: no LISTEN, "
                        "polling every %g s", cfg.claimed_by, cfg.poll_interval,
                        extra={"event": "worker_poll_only", "worker": cfg.claimed_by})
            return None
        listen_dsn = cfg.listen_dsn or dsn
        return Listener(listen_dsn, channels={"pgq": producer.on_notify, "pgq_cancel": runner.on_cancel},
                        on_connect=producer.on_listen, connect_kwargs=self._connect_kwargs(listen_dsn),
                        idle_check=cfg.effective_io_timeout, ping_timeout=cfg.effective_io_timeout)

    def _connect_kwargs(self, dsn: str) -> dict[str, Any]:
        """The App's connection kwargs, with the worker's connect_timeout unless `dsn` or they set one."""
        kwargs = dict(self.app.connect_kwargs)
        if "connect_timeout" not in kwargs and not conninfo_to_dict(dsn).get("connect_timeout"):
            kwargs["connect_timeout"] = max(2, math.ceil(self.config.connect_timeout))
        return kwargs

    def _start_metrics(self, dsn: str) -> None:
        cfg = self.config
        assert cfg.metrics_port is not None
        reader = BacklogReader(dsn, queues=cfg.queues, connect_kwargs=self.app.connect_kwargs)
        self._metrics_server = MetricsServer(self.metrics, cfg.metrics_host, cfg.metrics_port, reader)
        self._metrics_server.start()  # PgqError when the port is taken: the worker does not start
        host, port = self._metrics_server.address
        logger.info("serving metrics at http://%s:%d/metrics", host, port, extra={"event": "metrics_start"})

    def _watch(self, state: WorkerState, listener: Listener | None) -> None:
        self.metrics.watch(running=lambda: len(state.running), prefetched=lambda: len(state.held),
                           listen_connected=lambda: listener.connected if listener is not None else None,
                           listen_reconnects=lambda: listener.reconnects if listener is not None else 0)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
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
        self._fail_fatally(exc)

    def _fail_fatally(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        if self._state is not None:
            self._state.begin_abort()

    def _install_signals(self, loop: asyncio.AbstractEventLoop, force: bool) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            if force:
                # Documented (docs/testing.md runs a worker in a thread): stop() ends it there.
                logger.info("not in the main thread: SIGTERM/SIGINT handlers not installed; stop() stops it")
            return []
        installed: list[int] = []
        workers = _signal_workers.setdefault(loop, {})
        for sig in (signal.SIGTERM, signal.SIGINT):
            if sig not in workers:
                if not force and _handled_elsewhere(sig):
                    logger.info("%s is handled by the application: not installing the worker's handler "
                                "(call worker.stop() on shutdown)", signal.Signals(sig).name,
                                extra={"event": "worker_signal"})
                    continue
                _signal_previous[loop, sig] = signal.getsignal(sig)
                loop.add_signal_handler(sig, _dispatch_signal, loop, sig)
                workers[sig] = []
            workers[sig].append(self)
            installed.append(sig)
        return installed

    def _on_signal(self, sig: int) -> None:
        state = self._state
        assert state is not None
        name = signal.Signals(sig).name
        if not state.stopping.is_set():
            logger.info("%s received: draining (up to %g s); send it again to abort", name,
                        self.config.drain_timeout, extra={"event": "worker_signal"})
            state.begin_stop()
        else:
            logger.warning("%s received again: aborting, releasing running jobs now", name,
                           extra={"event": "worker_signal"})
            state.begin_abort()


def queue_warnings(app: App, queues: Sequence[str] | None, *, periodic: bool = True) -> list[str]:
    """What a worker serving `queues` (None: all) of `app` should warn about at start, one line each:
    every periodic task whose ticks go to a queue it does not serve (checked when `periodic`, i.e.
    the worker runs maintenance and so enqueues ticks), and every queue of `queues` that no task of
    the app is enqueued into by default. Empty when all is well."""
    if queues is None:
        return []
    served = set(queues)
    lines = []
    if periodic:
        for p in app.periodic_tasks:
            if p.queue not in served:
                lines.append(f"periodic task {p.name!r} enqueues its ticks into queue {p.queue!r}, which this "
                             f"worker does not serve (queues: {', '.join(queues)}): a worker serving {p.queue!r} "
                             f"must run them")
    used = {t.queue for t in app.tasks.values()}
    for name in queues:
        if name not in used:
            lines.append(f"queue {name!r}: no task of this app is enqueued there by default (tasks' queues: "
                         f"{', '.join(sorted(used)) or 'none'}); this worker runs only jobs enqueued there "
                         f"explicitly")
    return lines


# The workers of each loop that handle each signal: one loop handler per signal serves them all, so
# that several workers running in one loop all drain on the same SIGTERM.
_signal_workers: dict[asyncio.AbstractEventLoop, dict[int, list[Worker]]] = {}
_signal_previous: dict[tuple[asyncio.AbstractEventLoop, int], Any] = {}  # the handler to restore


def _dispatch_signal(loop: asyncio.AbstractEventLoop, sig: int) -> None:
    for worker in list(_signal_workers.get(loop, {}).get(sig, ())):
        worker._on_signal(sig)


def _signal_workers_remove(loop: asyncio.AbstractEventLoop, worker: Worker, signals: list[int]) -> None:
    """`worker` stops handling `signals`; a signal no worker of `loop` handles any more gets its
    previous handling back."""
    workers = _signal_workers.get(loop, {})
    for sig in signals:
        handlers = workers.get(sig, [])
        if worker in handlers:
            handlers.remove(worker)
        if not handlers and sig in workers:
            del workers[sig]
            loop.remove_signal_handler(sig)
            previous = _signal_previous.pop((loop, sig), None)
            if previous is not None:  # asyncio.run's Ctrl-C handling, or the application's
                signal.signal(sig, previous)
    if not workers:
        _signal_workers.pop(loop, None)


def _handled_elsewhere(sig: int) -> bool:
    """Whether someone other than Python's defaults and asyncio.run handles (or ignores) `sig`."""
    current = signal.getsignal(sig)
    if current in (signal.SIG_DFL, signal.default_int_handler, None):
        return False
    func = current.func if isinstance(current, functools.partial) else current  # asyncio.Runner's is a partial
    return not isinstance(getattr(func, "__self__", None), asyncio.Runner)


def _not_ready(*_: object) -> None:
    raise AssertionError("the worker's runner is not set up yet")
