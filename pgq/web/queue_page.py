"""The queue page's read (`/queues/NAME`, `GET /api/queues/NAME`): one queue's counts and chart (the
overview's, for that queue), how many of its jobs are in each state, the workers serving it, and the
jobs of one state tab (sql/dashboard_queue_counts.sql, sql/dashboard_queue_tab.sql,
sql/dashboard_queue_workers.sql)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from .. import _ops
from . import queries

__all__ = ["CANCELLED_CAP", "TABS", "QueuePage", "queue_page"]

TABS: Final = ("ready", "scheduled", "retrying", "running", "waiting", "failed", "cancelled")
"""The queue page's state tabs, in the order shown."""

CANCELLED_CAP = 10_000
"""The queue page counts a queue's cancelled jobs up to this many (index-only, through
jobs_cancelled_idx, revision 0031); beyond it the count says "more than" (`cancelled_partial`)."""


@dataclass(frozen=True, slots=True)
class QueuePage:
    """One queue as its page shows it, read in one transaction at `now` (database clock).

    `summary`: its overview row (backlog now, finished in the chart's hour, pause state; None when
    the queue has no job waiting, queued or running, is not paused and finished none in the hour).
    `counts`: jobs per tab, exact; `cancelled` up to CANCELLED_CAP (`cancelled_partial` when it has
    more). `jobs`: the tab's jobs.
    `workers`: registered workers that claim from this queue (or from every queue), and those
    running its jobs now, each with `running` (its jobs of this queue) and `running_all`."""

    now: dt.datetime
    name: str
    summary: queries.QueueSummary | None
    throughput: queries.Throughput
    counts: dict[str, int]
    cancelled_partial: bool
    tab: str
    jobs: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    rights: queries.Rights


def queue_page(name: str, tab: str, *, limit: int = 50, cancelled_cap: int = CANCELLED_CAP,
               finished_cap: int = queries.FINISHED_CAP) -> _ops.Operation[QueuePage]:
    """The page of queue `name` with the jobs of state tab `tab` (one of TABS; the caller checks it),
    at most `limit` of them."""

    def steps() -> _ops.Steps[QueuePage]:
        overview = yield from queries.overview(finished_cap).steps()
        summary = next((q for q in overview.queues if q.name == name), None)
        kept = (yield _ops.Stmt("dashboard_queue_counts", {"queue": name, "cap": cancelled_cap}))[0]
        s = summary or queries.QueueSummary(name)
        counts = {"ready": s.ready, "scheduled": s.scheduled, "retrying": s.retrying, "running": s.running,
                  "waiting": s.waiting, "failed": int(kept["failed"]), "cancelled": int(kept["cancelled"])}
        jobs = [dict(r) for r in (yield _ops.Stmt("dashboard_queue_tab", {"queue": name, "tab": tab, "limit": limit}))]
        workers = [dict(w) for w in (yield _ops.Stmt("dashboard_queue_workers", {"queue": name}))]
        return QueuePage(overview.now, name, summary, overview.throughput, counts, bool(kept["cancelled_capped"]),
                         tab, jobs, workers, overview.rights)

    return queries._read("dashboard_queue", steps)
