"""The fault-proxy scenarios' shared pieces: the `Faults` helper around a FaultProxy in front of the
test server (the `faults` fixture in conftest.py builds it), the worker settings they use, and the
markers that name pgq's statements on the wire."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import pgq

from .. import history
from ..faultproxy import FaultProxy
from .conftest import DB, WorkerProcess, wait_for

LEASE_S = 2.0
IO_TIMEOUT_S = 5.0  # the worker's default for this lease (a quarter of it, at least 5 s)
HEARTBEAT_S = LEASE_S / 3
POLL_S = 0.5


@dataclass
class Faults:
    """The proxy in front of the test server, and what a test needs around it."""

    proxy: FaultProxy
    db: DB
    direct_dsn: str
    dbname: str
    spawn: Callable[..., WorkerProcess]

    @property
    def proxied_dsn(self) -> str:
        """The test database, through the proxy."""
        return self.proxy.dsn(self.dbname)

    def worker(self, name: str, *args: str, through_proxy: bool = True, listen_dsn: str | None = None,
               concurrency: int = 8) -> WorkerProcess:
        """Start a worker process named `name` (its claimed_by) on queue "work" with a 2 s lease."""
        dsn = self.proxied_dsn if through_proxy else self.direct_dsn
        extra = ["--listen-dsn", listen_dsn] if listen_dsn else []
        return self.spawn("--queue", "work", "--concurrency", str(concurrency), "--lease", str(LEASE_S),
                          "--poll-interval", str(POLL_S), "--rescue-interval", "1", "--name", name,
                          "--log-level", "INFO", *extra, *args,
                          env={"PGQ_TEST_WORKER_DSN": dsn, "PGQ_TEST_EFFECTS_DSN": self.direct_dsn})

    def enqueue_chaos(self, count: int, ms: float, start: int = 0) -> list[int]:
        """Enqueue `count` chaos jobs (work `ms`, record one effect, return the lease token)."""
        with pgq.Queue(self.direct_dsn) as queue:
            return queue.enqueue_many([pgq.JobSpec("chaos", {"n": n, "ms": ms, "rerun_ms": ms}, queue="work")
                                       for n in range(start, start + count)])

    def now(self) -> Any:
        """The database's clock."""
        return self.db.value("SELECT clock_timestamp()")

    def first_claim_after(self, worker: str, at: Any) -> float | None:
        """Seconds from `at` to the first claim by `worker` after it (None: none yet)."""
        return self.db.value("SELECT extract(epoch FROM min(at) - %s)::float8 FROM history "
                             "WHERE event = 'claim' AND worker = %s AND at > %s", (at, worker, at))

    def succeeded(self) -> int:
        """Jobs succeeded so far."""
        return int(self.db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'succeeded'"))

    def wait_all_succeeded(self, total: int, timeout: float, what: str) -> None:
        """Wait until `total` jobs succeeded (fail on timeout, or when one ended otherwise)."""
        def done() -> bool:
            counts = self.db.status_counts()
            bad = set(counts) - {"queued", "running", "succeeded"}
            assert not bad, f"{what}: jobs ended {counts}"
            return counts.get("succeeded", 0) == total
        wait_for(done, timeout, what, interval=0.1)

    def check_history(self, *, effects: bool = True) -> history.Report:
        """The history check, failing on any violation."""
        report = history.check(self.db.conn, effects=effects)
        assert not report.violations, f"history violations: {report.violations}\n{report.summary()}"
        return report


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Print a scenario's figures even when the test passes."""
    with capsys.disabled():
        print(f"\n{text}")


# Statements are recognised by the comment each sql/*.sql file starts with (the completion and the
# heartbeat as sent at once, job_complete.sql, or past a held row, job_complete_skip.sql).
CLAIM, COMPLETE, HEARTBEAT = "-- job_claim", "-- job_complete", "-- job_heartbeat"
