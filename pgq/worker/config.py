"""`WorkerConfig`: a worker's settings, validated on construction."""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass, field, fields
from typing import Any

from ..bounds import lease_s
from ..errors import InvalidJob

__all__ = ["WorkerConfig", "default_worker_name"]

_DAY = 86400.0


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
      that stopped reading (see `pgq.worker.maintenance.Rescuer`).
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
    - `io_timeout`: longest wait for the database's answer to one of the worker's statements (default
      None: a quarter of the lease, at least 5 s). Past it the connection is taken for dead (a
      half-open network, a stalled server) and closed, and the statement retried on a new one, so a
      worker recovers from a black-holed connection instead of waiting on it for ever. The LISTEN
      connection pings the server after that long without a notification, with the same limit for the
      answer. Set it above the slowest statement you expect.
    - `connect_timeout`: seconds to wait for a new connection (libpq's connect_timeout), unless the
      DSN sets its own.
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
    io_timeout: float | None = None
    connect_timeout: float = 10.0

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
        for name in ("lease", "poll_interval", "retention_interval", "shutdown_timeout", "connect_timeout"):
            _check_seconds(name, getattr(self, name), positive=True)
        lease_s("lease", self.lease)  # at most a day (pgq.bounds)
        for name in ("drain_timeout", "ack_delay"):
            _check_seconds(name, getattr(self, name), positive=False)
        for name in ("rescue_interval", "retention", "io_timeout"):
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
    def effective_io_timeout(self) -> float:
        """`io_timeout`, or a quarter of the lease but at least 5 s."""
        return self.io_timeout if self.io_timeout is not None else max(self.lease / 4, 5.0)

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

