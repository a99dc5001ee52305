"""Prometheus metrics of a worker, exposed through `prometheus_client`: its registry, a collector
of ours, its text exposition and its HTTP server.

`Metrics` holds the values. The worker calls `job_event` and `job_duration` on its event loop: each
is a dict update, no lock (prometheus_client's own Counter takes a lock per increment). A collector
(`prometheus_client.registry.Collector`) turns them into metric families when a scrape asks: it
copies the dicts (`dict.copy()` and `list()` of a list are atomic under the GIL), so a scrape never
waits for the worker and the worker never waits for a scrape.

`MetricsServer` serves `GET /metrics` with `prometheus_client.start_http_server` from its own daemon
thread, never from the worker's event loop. Queue gauges (depth and oldest-ready age per queue) come
from the database view `pgq.queue_backlog` (`sql/queue_backlog.sql`), which reads only queued and running jobs through
partial indexes; the server runs it on a connection of its own at most once per `cache_seconds`,
however often it is scraped, and serves the last values meanwhile.

Exposed families (labels in braces):

- counters `pgq_jobs_claimed_total`, `pgq_jobs_succeeded_total`, `pgq_jobs_retried_total`,
  `pgq_jobs_failed_total`, `pgq_jobs_snoozed_total`, `pgq_jobs_released_total`,
  `pgq_jobs_rescued_total`, `pgq_jobs_cancelled_total`, `pgq_lease_lost_total` {queue, kind};
- histogram `pgq_job_duration_seconds` {queue, kind}: handler run time of every attempt that finished
  (succeeded, failed, retried, snoozed; not jobs released at shutdown);
- `pgq_listen_reconnects_total`, `pgq_listen_connected`, `pgq_worker_jobs_running`,
  `pgq_worker_jobs_prefetched`, `pgq_worker_concurrency`, `pgq_worker_info` {worker, queues, version};
- gauges from the database: `pgq_queue_jobs` {queue, state = ready | scheduled | running},
  `pgq_queue_expired_leases` {queue}, `pgq_queue_oldest_ready_age_seconds` {queue},
  `pgq_queue_live_workers` {queue} (registered live workers claiming from it: the worker registry),
  `pgq_queue_unknown_kind_jobs` {queue, kind} (queued jobs of a kind no live worker of the queue
  knows: they wait, untouched, for a worker whose app has the task; issue #42; counted up to 10,000
  per queue and kind: 10,000 reads "10,000 or more", issue #44),
  `pgq_queue_stats_up` (1 when the last database read worked).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import importlib.metadata
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import psycopg

from . import _ops
from .errors import PgqError, one_line

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

# prometheus_client (and the http.server it imports) loads with the first scrape or metrics server,
# not with every worker: the worker's hot path only updates the dicts of `Metrics`.

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "JOB_EVENTS", "Backlog", "BacklogReader", "Metrics", "MetricsServer",
           "format_value"]

logger = logging.getLogger("pgq.metrics")

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of the Prometheus text exposition format."""

DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                           900.0, 3600.0)
"""Upper bounds (seconds) of the job duration histogram's buckets; +Inf is added."""

# Event name (as in Worker.stats) -> metric family and its help text.
JOB_EVENTS: Final[dict[str, tuple[str, str]]] = {
    "claimed": ("pgq_jobs_claimed_total", "Jobs this worker claimed and started."),
    "succeeded": ("pgq_jobs_succeeded_total", "Jobs this worker finished successfully."),
    "retried": ("pgq_jobs_retried_total",
                "Attempts that failed (or finished with newer input waiting) and were queued again."),
    "failed": ("pgq_jobs_failed_total", "Jobs this worker failed for good (no attempts left, or final)."),
    "snoozed": ("pgq_jobs_snoozed_total", "Jobs this worker snoozed (rescheduled without spending an attempt)."),
    "released": ("pgq_jobs_released_total", "Jobs this worker handed back to the queue at shutdown."),
    "rescued": ("pgq_jobs_rescued_total",
                "Jobs whose lease expired, taken back by this worker's maintenance (it runs on one worker "
                "at a time: sum over workers)."),
    "cancelled": ("pgq_jobs_cancelled_total",
                  "Running jobs whose handler this worker interrupted because the job was cancelled."),
    "lost": ("pgq_lease_lost_total",
             "Attempts that lost their lease (rescued, or finished elsewhere): the worker stopped the "
             "handler, or the database refused its acknowledgement."),
}


@functools.cache
def _version() -> str:
    try:
        return importlib.metadata.version("pgq-jobs")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


def format_value(value: float) -> str:
    """A sample value as the text format writes it (integers without a fraction, +Inf, NaN)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


@dataclass(frozen=True, slots=True)
class Backlog:
    """The database's view of the queues at one moment (`pgq.queue_backlog`), or `ok=False`."""

    ok: bool
    rows: tuple[dict[str, Any], ...] = ()


class Metrics:
    """The metrics of one worker. `job_event`, `job_duration` and `watch` are called from the
    worker's event loop thread only; `render` may be called from any thread at any time."""

    def __init__(self, worker: str, *, queues: Sequence[str] | None, concurrency: int,
                 buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError("buckets must be increasing and not empty")
        self.worker = worker
        self.queues = tuple(queues) if queues is not None else None
        self.concurrency = concurrency
        self._buckets = tuple(float(b) for b in buckets)
        self._counters: dict[tuple[str, str, str], int] = {}  # (event, queue, kind) -> count
        # (queue, kind) -> [count of bucket 0, ..., count of +Inf bucket, sum of seconds]; not cumulative.
        self._durations: dict[tuple[str, str], list[float]] = {}
        self._running: Callable[[], int] = lambda: 0
        self._prefetched: Callable[[], int] = lambda: 0
        self._listen_connected: Callable[[], bool | None] = lambda: None
        self._listen_reconnects: Callable[[], int] = lambda: 0

    def job_event(self, event: str, queue: str, kind: str) -> None:
        """Count one `event` (a key of JOB_EVENTS) of a job of `queue` and `kind`."""
        key = (event, queue, kind)
        counters = self._counters
        counters[key] = counters.get(key, 0) + 1

    def job_duration(self, queue: str, kind: str, seconds: float) -> None:
        """Observe one attempt's run time in the duration histogram."""
        histogram = self._durations.get((queue, kind))
        if histogram is None:
            histogram = self._durations[(queue, kind)] = [0.0] * (len(self._buckets) + 2)
        histogram[bisect.bisect_left(self._buckets, seconds)] += 1
        histogram[-1] += seconds

    def watch(self, *, running: Callable[[], int], prefetched: Callable[[], int],
              listen_connected: Callable[[], bool | None], listen_reconnects: Callable[[], int]) -> None:
        """Where the gauges read the worker's state from (called once the worker runs). The
        callables run on the scraping thread: they must only read (e.g. `len()` of a dict)."""
        self._running = running
        self._prefetched = prefetched
        self._listen_connected = listen_connected
        self._listen_reconnects = listen_reconnects

    def count(self, event: str, queue: str, kind: str) -> int:
        """The current value of one counter (for tests and embedding)."""
        return self._counters.get((event, queue, kind), 0)

    def render(self, backlog: Backlog | None = None) -> str:
        """The whole exposition in the text format (prometheus_client's), ending with a newline.
        `backlog`: database gauges to include (None: leave them out)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self, lambda: backlog))
        return generate_latest(registry).decode()

    def families(self, backlog: Backlog | None = None) -> Iterator[Metric]:
        """Every metric family, read now (from any thread); with `backlog`'s database gauges."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        counters = self._counters.copy()
        durations = {key: list(values) for key, values in self._durations.copy().items()}
        by_event: dict[str, list[tuple[str, str, int]]] = {event: [] for event in JOB_EVENTS}
        for (event, queue, kind), value in sorted(counters.items()):
            by_event.setdefault(event, []).append((queue, kind, value))
        for event, (name, help_text) in JOB_EVENTS.items():
            counter = CounterMetricFamily(name, help_text + " By queue and kind.", labels=("queue", "kind"))
            for queue, kind, value in by_event[event]:
                counter.add_metric((queue, kind), value)
            yield counter

        histogram = HistogramMetricFamily("pgq_job_duration_seconds",
                                          "Run time of the handler of each finished attempt, by queue and kind.",
                                          labels=("queue", "kind"))
        bounds = [format_value(b) for b in self._buckets] + ["+Inf"]
        for (queue, kind), values in sorted(durations.items()):
            cumulative, buckets = 0.0, []
            for bound, bucket in zip(bounds, values[:-1], strict=True):
                cumulative += bucket
                buckets.append((bound, cumulative))
            histogram.add_metric((queue, kind), buckets, values[-1])
        yield histogram

        yield CounterMetricFamily("pgq_listen_reconnects_total",
                                  "Times the LISTEN connection was re-established after it failed.",
                                  value=self._listen_reconnects())
        connected = self._listen_connected()
        if connected is not None:
            yield GaugeMetricFamily("pgq_listen_connected", "1 while the LISTEN connection is up.",
                                    value=1 if connected else 0)
        yield GaugeMetricFamily("pgq_worker_jobs_running", "Jobs whose handlers run now.", value=self._running())
        yield GaugeMetricFamily("pgq_worker_jobs_prefetched", "Jobs claimed ahead and held until a slot frees.",
                                value=self._prefetched())
        yield GaugeMetricFamily("pgq_worker_concurrency", "Jobs the worker runs at once at most.",
                                value=self.concurrency)
        info = GaugeMetricFamily("pgq_worker_info", "The worker's name, queues and pgq version; always 1.",
                                 labels=("worker", "queues", "version"))
        info.add_metric((self.worker, ",".join(self.queues or ("*",)), _version()), 1)
        yield info
        if backlog is not None:
            yield from self._backlog_families(backlog)

    def _backlog_families(self, backlog: Backlog) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        rows = {row["queue"]: row for row in backlog.rows}
        if backlog.ok and self.queues is not None:  # queues without jobs still have values: zero
            for queue in self.queues:
                rows.setdefault(queue, {"queue": queue, "ready": 0, "scheduled": 0, "running": 0,
                                        "expired_leases": 0, "oldest_ready_age_s": None, "live_workers": 0})
        jobs = GaugeMetricFamily("pgq_queue_jobs",
                                 "Jobs per queue and state, from the database (ready: due now; scheduled: run_at "
                                 "in the future; running: claimed by some worker).", labels=("queue", "state"))
        expired = GaugeMetricFamily("pgq_queue_expired_leases",
                                    "Running jobs whose lease expired (worker dead or hung), from the database.",
                                    labels=("queue",))
        age = GaugeMetricFamily("pgq_queue_oldest_ready_age_seconds",
                                "How long the oldest ready job of the queue has been due (0: none), database clock.",
                                labels=("queue",))
        live = GaugeMetricFamily("pgq_queue_live_workers",
                                 "Live workers claiming from the queue, from the worker registry (pgq.workers).",
                                 labels=("queue",))
        unknown = GaugeMetricFamily("pgq_queue_unknown_kind_jobs",
                                    "Queued jobs of a kind no live worker claiming from the queue knows: they wait, "
                                    "untouched, until a worker whose app has the task starts. Counted up to "
                                    f"{_ops.UNKNOWN_KINDS_CAP:,} per queue and kind ({_ops.UNKNOWN_KINDS_CAP:,}: "
                                    "that many or more).",
                                    labels=("queue", "kind"))
        for queue in sorted(rows):
            row = rows[queue]
            for kind, n in sorted((row.get("unknown_kinds") or {}).items()):
                unknown.add_metric((queue, kind), n)
            for state in ("ready", "scheduled", "running"):
                jobs.add_metric((queue, state), row[state])
            expired.add_metric((queue,), row["expired_leases"])
            seconds = row["oldest_ready_age_s"]
            age.add_metric((queue,), max(float(seconds), 0.0) if seconds is not None else 0.0)
            live.add_metric((queue,), row.get("live_workers", 0))
        yield jobs
        yield expired
        yield age
        yield live
        yield unknown
        yield GaugeMetricFamily("pgq_queue_stats_up",
                                "1 when the last read of the queue gauges from the database worked.",
                                value=1 if backlog.ok else 0)


class _Collector:
    """A prometheus_client collector (it needs only `collect`): one worker's `Metrics`, with the
    database gauges `backlog()` reads (None: none) at each scrape."""

    def __init__(self, metrics: Metrics, backlog: Callable[[], Backlog | None]) -> None:
        self._metrics = metrics
        self._backlog = backlog

    def collect(self) -> Iterator[Metric]:
        """The families of a scrape (prometheus_client calls this on the scraping thread)."""
        return self._metrics.families(self._backlog())


class BacklogReader:
    """Reads `pgq.queue_backlog` for `queues` (None: every queue) over one connection of its own,
    at most once per `cache_seconds`; `read()` returns the cached values in between.

    Thread-safe (a lock serializes reads). A failed read returns `Backlog(ok=False)`, drops the
    connection, and is not retried before `cache_seconds` pass. `close()` closes the connection.
    """

    def __init__(self, dsn: str, *, queues: Sequence[str] | None, connect_kwargs: dict[str, Any] | None = None,
                 cache_seconds: float = 5.0, connect_timeout: int = 3) -> None:
        self._dsn = dsn
        self._queues = list(queues) if queues is not None else None
        self._kwargs = {k: v for k, v in (connect_kwargs or {}).items() if k != "autocommit"}
        self._kwargs.setdefault("connect_timeout", connect_timeout)
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._cached = Backlog(False)
        self._read_at = -math.inf
        self.reads = 0
        """Database reads done so far (cache misses)."""

    def read(self) -> Backlog:
        """The backlog per queue, from the cache when it is younger than `cache_seconds`."""
        with self._lock:
            if time.monotonic() - self._read_at < self._cache_seconds:
                return self._cached
            self._read_at = time.monotonic()
            self.reads += 1
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._dsn, autocommit=True, **self._kwargs)
                rows = _ops.run_sync(self._conn, _ops.queue_backlog(self._queues), own_transaction=True)
                self._cached = Backlog(True, tuple(rows))
            except (psycopg.Error, PgqError) as exc:
                logger.warning("metrics: cannot read the queue backlog (%s)", one_line(exc),
                               extra={"event": "metrics_error"})
                self._close()
                self._cached = Backlog(False)
            return self._cached

    def close(self) -> None:
        """Close the connection (a later read opens a new one)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


class MetricsServer:
    """Serves `metrics` (and the database gauges of `reader`, if given) at http://host:port/metrics
    from a daemon thread, with prometheus_client's HTTP server and a registry of this worker's own.
    `start()` binds (port 0: a free port, see `address`) and raises PgqError when it cannot; `stop()`
    stops serving and closes the reader's connection. Not restartable."""

    def __init__(self, metrics: Metrics, host: str, port: int, reader: BacklogReader | None = None) -> None:
        self._host = host
        self._port = port
        self._reader = reader
        from prometheus_client import CollectorRegistry

        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=False)
        """The registry served (prometheus_client), holding this worker's collector."""
        self.registry.register(_Collector(metrics, reader.read if reader is not None else lambda: None))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound; only after `start()`."""
        if self._server is None:
            raise RuntimeError("the metrics server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Bind and start serving in a daemon thread. Raises PgqError when the address cannot be bound."""
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(self._port, self._host, self.registry)
        except OSError as exc:
            raise PgqError(f"cannot serve metrics on {self._host}:{self._port}: {exc.strerror or exc}") from None

    def stop(self) -> None:
        """Stop serving and release the port and the database connection."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._reader is not None:
            self._reader.close()
