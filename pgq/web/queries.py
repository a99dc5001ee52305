"""The dashboard's reads, as pgq's sans-I/O operations (`pgq._ops`): each yields the statements of
`sql/dashboard_*.sql` (and of pgq's own files where one fits) and builds what a page or an API call
shows from their rows. `Dashboard.read` drives them on a connection of its pool.

Every read runs in one transaction whose first statement is `dashboard_guard` (a statement timeout,
JIT off, and the database clock, which is where every age and chart minute comes from), and every
statement reads a bounded slice of pgq.jobs through an index: see each SQL file for which. Nothing
here counts the whole table.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import _ops
from ..insight import Explanation
from ..models import Dependencies, Job, JobStatus
from ..tasks import Periodic

__all__ = [
    "DAY_MINUTES",
    "DEPENDENCIES_SHOWN",
    "FINAL",
    "FINISHED_CAP",
    "MINUTES",
    "RANGES",
    "SEARCH_BUDGET_S",
    "SEARCH_EMPTY_BUDGET_S",
    "SEARCH_WINDOW",
    "SEARCH_WINDOW_MAX",
    "ChartRange",
    "JobDetail",
    "JobFilter",
    "JobPage",
    "Limits",
    "Overview",
    "QueueSummary",
    "Rights",
    "ScheduleRow",
    "Throughput",
    "Workers",
    "find_jobs",
    "job_detail",
    "limits",
    "overview",
    "queue_names",
    "rights",
    "schedules",
    "throughput",
    "workers",
]

STATEMENT_TIMEOUT = "10s"
"""How long any one dashboard statement may run (dashboard_guard.sql says why there is a limit)."""

MINUTES = 60
"""The overview's chart: this many minutes, the current one last."""

FINISHED_CAP = 50_000
"""The dashboard counts at most this many finished jobs from the jobs themselves per read: those of the
jobs finished since the last pass of the counts (dashboard_finished_counts.sql). Only a database whose
counts are not kept (no worker running the maintenance loop) ever has that many."""

SEARCH_WINDOW = 25_000
"""The job search reads jobs_pkey in ranges of this many ids per statement (dashboard_jobs.sql): 5 to
15 ms each on a table of a million jobs, so that the time budget below is kept to within one."""

SEARCH_WINDOW_MAX = 400_000
"""The search's windows double from SEARCH_WINDOW up to this many ids (one statement each)."""

SEARCH_EMPTY_BUDGET_S = 1.5
"""While a search has found nothing it goes on for up to this many seconds (then answers with
`partial` set): a rare match over a long history is found in one request, not page by page."""

SEARCH_BUDGET_S = 0.07
"""A job search starts no window that would, taking as long as the last one did, end past this many
seconds; it then returns what it found so far with the cursor to go on from. A search that matches
few jobs never holds a request (or the database) for long."""

RUNNING_LIMIT = 500
"""The workers page lists at most this many running jobs."""

TICKS_SHOWN = 5
"""The schedules page shows the jobs of each schedule's last this many ticks."""


# -- the first statement of every read, and rights ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rights:
    """What the dashboard's database role may do: cancel and retry jobs (`change_jobs`), pause and
    resume queues (`pause`)."""

    role: str
    change_jobs: bool
    pause: bool

    def refusal(self, action: str) -> str | None:
        """Why the role may not do `action` ("cancel", "retry", "delete", "run_now", "limits", "pause" or
        "resume"); None if it may."""
        if action in ("cancel", "retry", "delete", "run_now") and not self.change_jobs:
            return (f"the database role {self.role!r} may not cancel or retry jobs: that takes pgq's admin "
                    "role (pgq_admin by default; see `pgq roles`)")
        if action == "limits" and not self.change_jobs:
            return (f"the database role {self.role!r} may not change limits from the dashboard: that takes pgq's "
                    "admin role (pgq_admin by default; see `pgq roles`)")
        if action in ("pause", "resume") and not self.pause:
            return (f"the database role {self.role!r} may not pause or resume queues: that takes pgq's admin "
                    "role (pgq_admin by default; see `pgq roles`)")
        return None


@dataclass(frozen=True, slots=True)
class _CountsState:
    # How far pgq.finished_counts goes (dashboard_guard.sql): its minutes before `through` are counted.
    through: dt.datetime | None
    at: dt.datetime | None
    recount_s: float | None


@dataclass(frozen=True, slots=True)
class _Opening:
    # What a read's first statement (dashboard_guard) returns: the clock, the role's rights and how far
    # the kept counts go.
    now: dt.datetime
    rights: Rights
    counts: _CountsState


def _open() -> _ops.Steps[_Opening]:
    rows = yield _ops.Stmt("dashboard_guard", {"statement_timeout": STATEMENT_TIMEOUT,
                                               "idle_limit": _ops.TRANSACTION_IDLE_LIMIT})
    row = rows[0]
    # In UTC whatever the session's time zone (a caller's pool may not be in UTC): the chart's
    # minutes are labelled from it.
    now: dt.datetime = row["now"].astimezone(dt.UTC)
    return _Opening(now, Rights(str(row["role"]), bool(row["can_change_jobs"]), bool(row["can_pause"])),
                    _CountsState(row["counted_through"], row["counted_at"], row["recount_s"]))


def _guard() -> _ops.Steps[dt.datetime]:
    return (yield from _open()).now


def _read(name: str, steps: Any) -> _ops.Operation[Any]:
    # One transaction, guarded by its own first statement (dashboard_guard), retried as a whole after
    # a lost connection: it only reads.
    return _ops.Operation(name, steps, transaction=True, retry_safe=True, guards_itself=True)


def rights() -> _ops.Operation[Rights]:
    """What the dashboard's database role may do (read by sql/dashboard_guard.sql)."""

    def steps() -> _ops.Steps[Rights]:
        return (yield from _open()).rights

    return _read("dashboard_rights", steps)


# -- overview -----------------------------------------------------------------------------------


FINAL = ("succeeded", "failed", "cancelled")
"""The final statuses, as the counts name them."""


@dataclass
class QueueSummary:
    """One queue on the overview: its waiting, queued and running jobs now, its jobs finished in the chart's
    hour and in the last day, whether it is paused. Ages in seconds; None where there is nothing to measure."""

    name: str
    waiting: int = 0
    """Jobs waiting for parent jobs (enqueued with depends_on)."""
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    expired_leases: int = 0
    retrying: int = 0
    unknown_kind: int = 0
    """Of the retrying jobs, those a worker handed back because its app has no task of their kind,
    counted up to UNKNOWN_KINDS_CAP (`unknown_kind_capped`: it has more)."""
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    """Queued jobs per kind that no live worker of the queue knows (and those handed back for their
    kind): they wait, untouched, for a worker whose app has the task (sql/queue_unknown_kinds.sql),
    each counted up to UNKNOWN_KINDS_CAP."""
    unknown_kinds_capped: list[str] = field(default_factory=list)
    """The kinds of `unknown_kinds` whose count stopped at the cap: they have more jobs than that."""
    unknown_kind_capped: bool = False
    """`unknown_kind` stopped at UNKNOWN_KINDS_CAP: more of its retrying jobs were handed back."""
    workers: int = 0
    oldest_ready_age_s: float | None = None
    next_run_at: dt.datetime | None = None
    paused: bool = False
    paused_at: dt.datetime | None = None
    paused_by: str | None = None
    """Who paused it: the actor recorded with the pause (the dashboard's user, the CLI's --actor, the role)."""
    paused_role: str | None = None
    """The database role the pause ran as."""
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    per_minute: list[int] = field(default_factory=lambda: [0] * MINUTES)
    """Jobs of the queue finished per minute of the chart (any final status)."""
    failed_per_minute: list[int] = field(default_factory=lambda: [0] * MINUTES)
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    """The hour's finished jobs per kind: {kind: {"succeeded": n, "failed": n, "cancelled": n}}."""
    day: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINAL, 0))
    """Jobs finished in the last 24 hours (DAY_MINUTES minutes, the current one included), per final status."""
    day_kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    """The same per kind."""


@dataclass(frozen=True, slots=True)
class ChartRange:
    """A chart's window: `buckets` bars of `bucket_s` seconds each (whole minutes, from a whole UTC
    hour), the current (partial) one last."""

    key: str
    label: str
    buckets: int
    bucket_s: int


RANGES: dict[str, ChartRange] = {
    "1h": ChartRange("1h", "last hour", MINUTES, 60),
    "24h": ChartRange("24h", "last 24 hours", 96, 900),
    "7d": ChartRange("7d", "last 7 days", 168, 3600),
}
"""The charts the dashboard draws: per minute over an hour, per quarter hour over a day, per hour over a week."""

DAY_MINUTES = 1440
"""The "last 24 hours" counts: the current minute and the 1,439 before it."""


@dataclass(frozen=True, slots=True)
class Throughput:
    """Jobs finished per bucket over the chart's window (`bucket_s` seconds each: a minute for the hour),
    all queues together: `minutes[i]` is the start of bucket i (database clock; the last one is the
    current, partial one). `counted_from` is the first bucket whose counts are complete: `minutes[0]`,
    unless the jobs counted from the jobs themselves (those pgq.finished_counts does not hold yet) were
    more than FINISHED_CAP, when only the newest of them were counted (`capped`).

    `counted_through`: pgq.finished_counts holds the minutes before it (None: not kept yet, so all was
    counted from the jobs); `counted_at`: when the pass that counted them ran; `recount_s`: how long
    after that pass a finishing transaction may commit and still be counted (the pass counts that
    much again each time)."""

    minutes: list[dt.datetime]
    succeeded: list[int]
    failed: list[int]
    cancelled: list[int]
    counted_from: dt.datetime
    capped: bool
    bucket_s: int = 60
    counted_through: dt.datetime | None = None
    counted_at: dt.datetime | None = None
    recount_s: float | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """Everything the overview shows, read in one transaction at `now` (database clock). `throughput`: the
    hour's chart; `chart`: the chart of the range asked for (the same object for the hour)."""

    now: dt.datetime
    queues: list[QueueSummary]
    throughput: Throughput
    workers: int
    rights: Rights
    chart: Throughput | None = None
    day_since: dt.datetime | None = None
    """The first minute of the queues' "last 24 hours" counts."""


def _window_start(now: dt.datetime, window: ChartRange) -> dt.datetime:
    # The start of the current bucket (from a whole UTC hour, as date_bin cuts them), then back.
    epoch = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    current = epoch + dt.timedelta(seconds=(now - epoch).total_seconds() // window.bucket_s * window.bucket_s)
    return current - dt.timedelta(seconds=window.bucket_s * (window.buckets - 1))


def _minute_start(now: dt.datetime) -> dt.datetime:
    return _window_start(now, RANGES["1h"])


def _queue(by_name: dict[str, QueueSummary], name: str) -> QueueSummary:
    summary = by_name.get(name)
    if summary is None:
        summary = by_name[name] = QueueSummary(name)
    return summary


def _floor_hour(at: dt.datetime) -> dt.datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _count_params(since: dt.datetime, state: _CountsState, cap: int, bucket_s: int,
                  hourly: bool, buckets: bool = True) -> dict[str, Any]:
    # The ranges of dashboard_finished_counts.sql: what pgq.finished_counts holds ([since, through)),
    # in minutes, or with `hourly` its whole hours from pgq.finished_counts_hourly and the minutes
    # around them; from `live_from` on, the jobs. Without `buckets`, only the totals per kind.
    through = state.through
    live_from = since if through is None or through <= since else through
    m1 = m2 = h = (since, since)
    if live_from > since:
        m1 = (since, live_from)
        first_hour = _floor_hour(since) + (dt.timedelta(hours=1) if since != _floor_hour(since) else dt.timedelta(0))
        last_hour = _floor_hour(live_from)
        if hourly and first_hour < last_hour:
            m1, h, m2 = (since, first_hour), (first_hour, last_hour), (last_hour, live_from)
    return {"m1_from": m1[0], "m1_to": m1[1], "m2_from": m2[0], "m2_to": m2[1], "h_from": h[0], "h_to": h[1],
            "live_from": live_from, "cap": cap, "bucket": dt.timedelta(seconds=bucket_s), "buckets": buckets}


@dataclass(frozen=True, slots=True)
class _Counted:
    # A window's counts: its chart, the jobs per (bucket index, queue, status), per (queue, kind, status).
    throughput: Throughput
    by_bucket: list[tuple[int, str, str, int]]
    by_kind: list[tuple[str, str, str, int]]


def _counted(now: dt.datetime, window: ChartRange, state: _CountsState, cap: int) -> _ops.Steps[_Counted]:
    # The window's counts (sql/dashboard_finished_counts.sql).
    start = _window_start(now, window)
    # As tuples (bucket, queue, kind, status, jobs, live), in binary: the hour has some 600 rows.
    rows = yield _ops.Stmt("dashboard_finished_counts", _count_params(
        start, state, cap, window.bucket_s, hourly=window.bucket_s % 3600 == 0), fetch="tuples")
    buckets = [start + dt.timedelta(seconds=window.bucket_s * i) for i in range(window.buckets)]
    totals = {s: [0] * window.buckets for s in FINAL}
    live = 0
    first_live: int | None = None
    by_bucket: list[tuple[int, str, str, int]] = []
    by_kind: list[tuple[str, str, str, int]] = []
    for bucket, queue, kind, status, jobs, is_live in rows:
        if bucket is None:
            by_kind.append((queue, kind, status, jobs))
            continue
        index = int((bucket - start).total_seconds() // window.bucket_s)
        if not 0 <= index < window.buckets:
            continue  # a job committed with a finished_at in the future: not on this chart
        if is_live:
            live += jobs
            first_live = index if first_live is None else min(first_live, index)
        totals[status][index] += jobs
        by_bucket.append((index, queue, status, jobs))
    capped = live >= cap
    # Capped: the oldest bucket read from the jobs was read in part; the counts are complete from the next.
    last = window.buckets - 1
    counted_from = buckets[min((first_live or 0) + 1, last)] if capped else start
    throughput = Throughput(buckets, totals["succeeded"], totals["failed"], totals["cancelled"], counted_from,
                            capped, window.bucket_s, state.through, state.at, state.recount_s)
    return _Counted(throughput, by_bucket, by_kind)


def overview(finished_cap: int = FINISHED_CAP, chart_range: str = "1h") -> _ops.Operation[Overview]:
    """The overview: per queue its backlog, workers, pause state, last hour and last day (sql/dashboard_queues.sql,
    sql/dashboard_finished_counts.sql), the kinds no live worker of it knows (sql/queue_unknown_kinds.sql),
    the hour's throughput chart (and the chart of `chart_range`, one
    of RANGES), the number of busy workers, the rights. Counts of finished jobs are exact: from
    pgq.finished_counts for the minutes it holds, from the jobs for the newer ones (at most
    `finished_cap` of them: `Throughput.capped`)."""
    window = RANGES[chart_range]

    def steps() -> _ops.Steps[Overview]:
        opening = yield from _open()
        now, state = opening.now, opening.counts
        by_name: dict[str, QueueSummary] = {}
        busy = 0
        for row in (yield _ops.Stmt("dashboard_queues", {"cap": _ops.UNKNOWN_KINDS_CAP})):
            summary = _queue(by_name, row["queue"])
            for key in ("waiting", "ready", "scheduled", "running", "expired_leases", "retrying", "unknown_kind",
                        "workers"):
                setattr(summary, key, int(row[key]))
            summary.unknown_kind_capped = row["unknown_kind_capped"]
            busy = int(row["busy_workers"])
            summary.oldest_ready_age_s = row["oldest_ready_age_s"]
            summary.next_run_at = row["next_run_at"]
            summary.paused, summary.paused_at, summary.paused_by = row["paused"], row["paused_at"], row["paused_by"]
            summary.paused_role = row["paused_role"]
        unknown, capped = yield from _ops.unknown_kinds()
        for name, kinds in unknown.items():
            _queue(by_name, name).unknown_kinds = kinds
            _queue(by_name, name).unknown_kinds_capped = capped.get(name, [])
        hour = yield from _counted(now, RANGES["1h"], state, finished_cap)
        throughput = hour.throughput
        for index, queue, status, jobs in hour.by_bucket:
            summary = _queue(by_name, queue)
            setattr(summary, status, getattr(summary, status) + jobs)
            summary.per_minute[index] += jobs
            if status == "failed":
                summary.failed_per_minute[index] += jobs
        for queue, kind, status, jobs in hour.by_kind:
            _queue(by_name, queue).kinds.setdefault(kind, dict.fromkeys(FINAL, 0))[status] += jobs
        day_since = throughput.minutes[-1] - dt.timedelta(minutes=DAY_MINUTES - 1)
        for _, queue, kind, status, jobs, _ in (yield _ops.Stmt("dashboard_finished_counts", _count_params(
                day_since, state, finished_cap, 3600, hourly=True, buckets=False), fetch="tuples")):
            summary = _queue(by_name, queue)
            summary.day[status] += jobs
            summary.day_kinds.setdefault(kind, dict.fromkeys(FINAL, 0))[status] += jobs
        chart = throughput if window.key == "1h" else (yield from _counted(now, window, state, finished_cap)).throughput
        return Overview(now, [by_name[n] for n in sorted(by_name)], throughput, busy, opening.rights, chart,
                        day_since)

    return _read("dashboard_overview", steps)


def throughput(chart_range: str, queue: str | None = None,
               finished_cap: int = FINISHED_CAP) -> _ops.Operation[Throughput]:
    """Jobs finished per bucket over `chart_range` (one of RANGES), of queue `queue` (None: all), exact as
    `overview`'s counts are."""
    window = RANGES[chart_range]

    def steps() -> _ops.Steps[Throughput]:
        opening = yield from _open()
        counted = yield from _counted(opening.now, window, opening.counts, finished_cap)
        whole = counted.throughput
        if queue is None:
            return whole
        totals = {s: [0] * window.buckets for s in FINAL}
        for index, name, status, jobs in counted.by_bucket:
            if name == queue:
                totals[status][index] += jobs
        return Throughput(whole.minutes, totals["succeeded"], totals["failed"], totals["cancelled"],
                          whole.counted_from, whole.capped, whole.bucket_s, whole.counted_through, whole.counted_at,
                          whole.recount_s)

    return _read("dashboard_throughput", steps)


# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The job search's filters; None: any. `text` is looked for in the kind, the dedupe key and the last error,
    ignoring case; `payload` is JSON text the payload must contain (jsonb `@>`); `error_line` is the
    first line of the last error, as a dead-letter group has it (failed_groups): equal."""

    status: JobStatus | None = None
    queue: str | None = None
    kind: str | None = None
    text: str | None = None
    payload: str | None = None
    error_line: str | None = None

    @property
    def active(self) -> bool:
        """Whether any filter is set."""
        return any(v is not None for v in (self.status, self.queue, self.kind, self.text, self.payload,
                                           self.error_line))

    def bulk(self) -> _ops.JobFilter:
        """These filters as a bulk action's, matching the jobs the list shows (the text in the kind,
        the dedupe key or the last error alike)."""
        return _ops.JobFilter(queue=self.queue, kind=self.kind, status=self.status, text=self.text,
                              payload=None if self.payload is None else json.loads(self.payload),
                              error_line=self.error_line)

    def query(self) -> dict[str, str | None]:
        """These filters as the query parameters of a link (None: absent)."""
        return {"queue": self.queue, "kind": self.kind, "status": self.status.value if self.status else None,
                "q": self.text, "payload": self.payload,
                "error_line": None if self.error_line is None else json.dumps(self.error_line)}


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a job search, newest first. `next_cursor`: pass it as `before` to get the next page
    (older jobs); None when the search reached the oldest job. `partial`: the search stopped at its
    time budget before filling the page, having looked at every job with an id from `next_cursor`
    up and none below: the page may hold fewer than the limit, even none, and older jobs may match."""

    jobs: list[dict[str, Any]]
    next_cursor: int | None
    now: dt.datetime
    partial: bool = False


INDEXED_STATUSES = frozenset({JobStatus.WAITING, JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED})
"""Statuses with a partial index of their own: a search by one of them is complete in one statement
(sql/dashboard_jobs_indexed.sql)."""


def find_jobs(
    filters: JobFilter,
    *,
    before: int | None,
    limit: int,
    window: int = SEARCH_WINDOW,
    budget_s: float = SEARCH_BUDGET_S,
    empty_budget_s: float = SEARCH_EMPTY_BUDGET_S,
) -> _ops.Operation[JobPage]:
    """The jobs matching `filters` with an id below `before` (None: from the newest), newest first, at
    most `limit`. With a status that has its own index (INDEXED_STATUSES): one window of the newest ids,
    then, if the page is not full, the rest in one complete statement (sql/dashboard_jobs_indexed.sql;
    sql/dashboard_jobs_failed.sql for failed jobs);
    otherwise sql/dashboard_jobs.sql window by window, each window
    twice the last up to SEARCH_WINDOW_MAX ids, until the page is full, the oldest job is passed, or
    the time budget is spent: `budget_s` once a match was found, `empty_budget_s` while none was (so
    that a rare match is found in one request over a big history). See JobPage for the cursor."""

    def steps() -> _ops.Steps[JobPage]:
        now = yield from _guard()
        started = time.monotonic()
        bounds = (yield _ops.Stmt("dashboard_job_bounds", {}))[0]
        if bounds["max_id"] is None:
            return JobPage([], None, now)
        low_end = int(bounds["min_id"])
        high = int(bounds["max_id"]) + 1 if before is None else min(before, int(bounds["max_id"]) + 1)
        found: list[dict[str, Any]] = []
        params = {"status": None if filters.status is None else filters.status.value, "queue": filters.queue,
                  "kind": filters.kind, "text": filters.text, "payload": filters.payload,
                  "error_line": filters.error_line}
        indexed = filters.status in INDEXED_STATUSES
        size, windows = window, 0
        while high > low_end:
            if indexed and windows:
                # One window of the newest ids did not fill the page: the rest, complete, from the index.
                statement = "dashboard_jobs_failed" if filters.status is JobStatus.FAILED else "dashboard_jobs_indexed"
                rows = yield _ops.Stmt(statement, {**params, "high": high, "limit": limit - len(found)})
                found.extend(dict(r) for r in rows)
                return JobPage(found, int(found[-1]["id"]) if len(found) >= limit else None, now)
            low = max(high - size, low_end)
            window_started = time.monotonic()
            rows = yield _ops.Stmt("dashboard_jobs", {**params, "high": high, "low": low, "limit": limit - len(found)})
            found.extend(dict(r) for r in rows)
            if len(found) >= limit:
                return JobPage(found, int(found[-1]["id"]), now)
            high, windows = low, windows + 1
            ended = time.monotonic()
            spent = ended - window_started
            if not indexed and ended - started + 2 * spent > (budget_s if found else empty_budget_s):
                break
            size = min(size * 2, max(window, SEARCH_WINDOW_MAX))
        more = high > low_end
        return JobPage(found, high if more else None, now, partial=more)

    return _read("dashboard_jobs", steps)


DEPENDENCIES_SHOWN = 100
"""The job page lists at most this many parents and this many children (and says how many more)."""


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job as the job page shows it (None: no such job) with its parents and children (None when
    there is no job), the database clock, the rights."""

    job: Job | None
    dependencies: Dependencies | None
    now: dt.datetime
    rights: Rights
    explanation: Explanation | None = None
    blockers: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The jobs explain names as blocking it (parents, holders, a sequence's head), by id: status and times."""
    audit: list[dict[str, Any]] = field(default_factory=list)
    """The actions recorded on it in pgq.job_audit (single and bulk), newest first, at most 20."""


def blocker_ids(explanation: Explanation | None) -> list[int]:
    """The ids of the jobs `explanation`'s reasons name as blocking (at most 50)."""
    ids: list[int] = []
    for reason in explanation.reasons if explanation is not None else ():
        for key in ("holders", "parents", "held_by"):
            value = reason.facts.get(key)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, int) and not isinstance(item, bool) and item not in ids:
                    ids.append(item)
    return ids[:50]


def job_detail(job_id: int) -> _ops.Operation[JobDetail]:
    """One job (sql/job_get.sql, through pgq's own `get`), its dependencies (sql/job_dependencies.sql,
    through `dependencies`: at most DEPENDENCIES_SHOWN a side), why it is not running
    (sql/job_explain.sql) with the state of each job named as blocking it (sql/dashboard_job_states.sql),
    its audit (sql/dashboard_job_audit.sql), the clock and the rights."""

    def steps() -> _ops.Steps[JobDetail]:
        opening = yield from _open()
        now, who = opening.now, opening.rights
        job = yield from _ops.get(job_id, decoded=False).steps()
        deps = explanation = None
        blockers: dict[int, dict[str, Any]] = {}
        audit: list[dict[str, Any]] = []
        if job is not None:
            deps = yield from _ops.dependencies(job_id, limit=DEPENDENCIES_SHOWN).steps()
            explanation = Explanation.from_rows(job_id, (yield _ops.Stmt("job_explain", {"id": job_id})))
            ids = blocker_ids(explanation)
            if ids:
                blockers = {int(r["id"]): dict(r) for r in (yield _ops.Stmt("dashboard_job_states", {"ids": ids}))}
            audit = [dict(r) for r in (yield _ops.Stmt("dashboard_job_audit", {"id": job_id}))]
        return JobDetail(job, deps, now, who, explanation, blockers, audit)

    return _read("dashboard_job", steps)


FAILED_GROUPS_SCAN = 10_000
"""The dead-letter groups are made of at most this many of the newest failed jobs (issue #44: reading
all 103,000 failed jobs of 10,000,000 took 8.7 s)."""


def failed_groups(queue: str | None, kind: str | None,
                  scan: int | None = None) -> _ops.Operation[list[dict[str, Any]]]:
    """The newest `scan` (None: FAILED_GROUPS_SCAN) failed jobs of `queue` (None: all), those of `kind`
    (None: all) among them, grouped by kind and first line of error, with count, first and last seen,
    and `scanned`: how many failed jobs were read (`scan`: older ones were left out;
    sql/dashboard_failed_groups.sql)."""

    def steps() -> _ops.Steps[list[dict[str, Any]]]:
        yield from _guard()
        return [dict(r) for r in (yield _ops.Stmt("dashboard_failed_groups",
                                                  {"queue": queue, "kind": kind,
                                                   "scan": FAILED_GROUPS_SCAN if scan is None else scan}))]

    return _read("dashboard_failed_groups", steps)


def explain(job_id: int) -> _ops.Operation[Explanation | None]:
    """Why job `job_id` is not running now (sql/job_explain.sql); None when there is no such job."""

    def steps() -> _ops.Steps[Explanation | None]:
        yield from _guard()
        return Explanation.from_rows(job_id, (yield _ops.Stmt("job_explain", {"id": job_id})))

    return _read("job_explain", steps)


def queue_names() -> _ops.Operation[list[str]]:
    """Names of the queues with queued jobs or paused (sql/dashboard_queue_names.sql)."""

    def steps() -> _ops.Steps[list[str]]:
        yield from _guard()
        return [str(r["queue"]) for r in (yield _ops.Stmt("dashboard_queue_names", {}))]

    return _read("dashboard_queue_names", steps)


# -- workers, limits, schedules ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workers:
    """Every worker, registered or holding jobs (rows of sql/dashboard_workers.sql), and the running jobs, longest
    running first (sql/dashboard_running.sql, at most RUNNING_LIMIT)."""

    now: dt.datetime
    workers: list[dict[str, Any]]
    running: list[dict[str, Any]]


def workers() -> _ops.Operation[Workers]:
    """The workers page's data."""

    def steps() -> _ops.Steps[Workers]:
        now = yield from _guard()
        busy = yield _ops.Stmt("dashboard_workers", {})
        running = yield _ops.Stmt("dashboard_running", {"limit": RUNNING_LIMIT})
        return Workers(now, [dict(r) for r in busy], [dict(r) for r in running])

    return _read("dashboard_workers", steps)


@dataclass(frozen=True, slots=True)
class Limits:
    """Concurrency limits with the running jobs of each kind, rate limits with the starts in each
    window, per-group limits with the grouped jobs running and their groups
    (sql/dashboard_concurrency_limits.sql, sql/dashboard_rate_limits.sql,
    sql/group_limits_list.sql)."""

    now: dt.datetime
    concurrency: list[dict[str, Any]]
    rate: list[dict[str, Any]]
    group: list[dict[str, Any]]


def limits() -> _ops.Operation[Limits]:
    """The limits page's data."""

    def steps() -> _ops.Steps[Limits]:
        now = yield from _guard()
        concurrency = yield _ops.Stmt("dashboard_concurrency_limits", {})
        rate = yield _ops.Stmt("dashboard_rate_limits", {})
        group = yield _ops.Stmt("group_limits_list", {})
        return Limits(now, [dict(r) for r in concurrency], [dict(r) for r in rate], [dict(r) for r in group])

    return _read("dashboard_limits", steps)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One periodic schedule of the App: its next tick after `now`, and its last ticks (newest first),
    each with the job that ran it (a dict with id, status, created_at, finished_at) or None when the
    tick has no job (no worker ran the periodic step then, or retention deleted it)."""

    periodic: Periodic
    next_tick: dt.datetime | None
    ticks: list[tuple[dt.datetime, dict[str, Any] | None]]


_HORIZON = dt.timedelta(days=400)  # far enough for a yearly cron expression
_MICROSECOND = dt.timedelta(microseconds=1)


def _last_ticks(periodic: Periodic, now: dt.datetime, count: int) -> list[dt.datetime]:
    ticks: list[dt.datetime] = []
    until = now
    while len(ticks) < count:
        tick = periodic.schedule.latest(until - _HORIZON, until)
        if tick is None:
            break
        ticks.append(tick)
        until = tick - _MICROSECOND
    return ticks


def schedules(periodics: Iterable[Periodic]) -> _ops.Operation[tuple[dt.datetime, list[ScheduleRow]]]:
    """The schedules page's data for the App's `periodics`: ticks computed from the database clock, the
    job of each looked up by its dedupe key (sql/dashboard_ticks.sql)."""
    wanted = list(periodics)

    def steps() -> _ops.Steps[tuple[dt.datetime, list[ScheduleRow]]]:
        now = yield from _guard()
        ticks = [_last_ticks(p, now, TICKS_SHOWN) for p in wanted]
        pairs = [(p.queue, p.dedupe_key(t)) for p, ts in zip(wanted, ticks, strict=True) for t in ts]
        jobs: dict[int, dict[str, Any]] = {}
        if pairs:
            rows = yield _ops.Stmt("dashboard_ticks", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs]})
            jobs = {int(r["ord"]) - 1: dict(r) for r in rows}
        result: list[ScheduleRow] = []
        index = 0
        for periodic, own in zip(wanted, ticks, strict=True):
            shown: list[tuple[dt.datetime, dict[str, Any] | None]] = []
            for tick in own:
                shown.append((tick, jobs.get(index)))
                index += 1
            result.append(ScheduleRow(periodic, periodic.schedule.next_after(now, _HORIZON), shown))
        return now, result

    return _read("dashboard_schedules", steps)
