"""The queue page's read (`/queues/NAME`, `GET /api/queues/NAME`): one queue's counts and chart (the
overview's, for that queue), how many of its jobs are in each state, the workers serving it, and the
jobs of one state tab (sql/dashboard_queue_tab.sql, sql/dashboard_queue_cancelled.sql)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from .. import _ops
from . import queries

__all__ = ["CANCELLED_SCAN", "TABS", "QueuePage", "queue_page"]

TABS: Final = ("ready", "scheduled", "retrying", "running", "waiting", "failed", "cancelled")
"""The queue page's state tabs, in the order shown."""

CANCELLED_SCAN = 100_000
"""The cancelled tab reads at most this many of the newest finished jobs (of every queue): no index
serves cancelled jobs alone. A count over them is marked partial when the scan stopped there."""


@dataclass(frozen=True, slots=True)
class QueuePage:
    """One queue as its page shows it, read in one transaction at `now` (database clock).

    `summary`: its overview row (backlog now, finished in the chart's hour, pause state; None when
    the queue has no job waiting, queued or running, is not paused and finished none in the hour).
    `counts`: jobs per tab, exact; `cancelled` is counted on its own tab only (None on the others),
    among the newest CANCELLED_SCAN finished jobs, partially when `cancelled_partial` is True.
    `jobs`: the tab's jobs.
    `workers`: registered workers that claim from this queue (or from every queue), and those
    running its jobs now."""

    now: dt.datetime
    name: str
    summary: queries.QueueSummary | None
    throughput: queries.Throughput
    counts: dict[str, int | None]
    cancelled_partial: bool
    tab: str
    jobs: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    rights: queries.Rights


def _serves(worker: dict[str, Any], name: str) -> bool:
    serves = worker.get("serves")
    if worker.get("registered") and serves is None:
        return True
    return name in (serves or ()) or name in (worker.get("queues") or ())


def queue_page(name: str, tab: str, *, limit: int = 50, cancelled_scan: int = CANCELLED_SCAN,
               finished_cap: int = queries.FINISHED_CAP) -> _ops.Operation[QueuePage]:
    """The page of queue `name` with the jobs of state tab `tab` (one of TABS; the caller checks it),
    at most `limit` of them."""

    def steps() -> _ops.Steps[QueuePage]:
        overview = yield from queries.overview(finished_cap).steps()
        summary = next((q for q in overview.queues if q.name == name), None)
        failed = (yield _ops.Stmt("dashboard_queue_failed_count", {"queue": name}))[0]["failed"]
        s = summary or queries.QueueSummary(name)
        counts: dict[str, int | None] = {
            "ready": s.ready, "scheduled": s.scheduled, "retrying": s.retrying, "running": s.running,
            "waiting": s.waiting, "failed": int(failed), "cancelled": None}
        cancelled_partial = False
        if tab == "cancelled":
            # Only on its own tab: counting them reads up to `cancelled_scan` finished jobs.
            rows = yield _ops.Stmt("dashboard_queue_cancelled", {"queue": name, "scan": cancelled_scan,
                                                                 "limit": limit})
            cancelled_partial = int(rows[0]["scanned"]) >= cancelled_scan
            counts["cancelled"] = int(rows[0]["jobs"] or 0)
            jobs = [{k: v for k, v in r.items() if k not in ("scanned", "jobs")} for r in rows if r["id"] is not None]
        else:
            jobs = [dict(r) for r in (yield _ops.Stmt("dashboard_queue_tab", {
                "queue": name, "tab": tab, "limit": limit}))]
        workers = [dict(w) for w in (yield _ops.Stmt("dashboard_workers", {})) if _serves(dict(w), name)]
        return QueuePage(overview.now, name, summary, overview.throughput, counts, cancelled_partial, tab, jobs,
                         workers, overview.rights)

    return queries._read("dashboard_queue", steps)
