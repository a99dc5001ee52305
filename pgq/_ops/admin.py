"""Operations of operators: cancel, retry, get, list, dependencies, wait, purge, limits (concurrency
and rate), queue pause/resume and statistics."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import errors as pg_errors

from ..bounds import check_int4, checked
from ..errors import CONSTRAINT_MESSAGES, InvalidJob, InvalidState, NotFound
from ..models import (
    Dependencies,
    Job,
    JobStatus,
    delay_seconds,
)
from .core import (
    Operation,
    Steps,
    Stmt,
    _check_id,
    _queue_name,
    _text_list,
    check_actor,
)


def cancel(job_id: int, actor: str | None = None) -> Operation[Job]:
    """Cancel a waiting, queued or running job; raises NotFound or InvalidState (already finished).
    pgq.cancel records it in pgq.job_audit: `actor` (None: not named) and the database role."""
    _check_id(job_id)
    named = check_actor(actor)

    def steps() -> Steps[Job]:
        rows = yield Stmt("job_cancel", {"id": job_id, "actor": named})
        if rows:
            return Job.from_row(rows[0])
        current = yield from _get(job_id)
        raise InvalidState(job_id, current.status.value, "cancel")

    return Operation("job_cancel", steps)


def wait_mark(job_id: int) -> Operation[Job]:
    """Mark job `job_id` awaited (finishing it then notifies channel pgq_finished) and return it as
    it is now; raises NotFound. Idempotent."""
    _check_id(job_id)

    def steps() -> Steps[Job]:
        rows = yield Stmt("job_wait_mark", {"id": job_id})
        if rows:
            return Job.from_row(rows[0])
        return (yield from _get(job_id))

    return Operation("job_wait_mark", steps, retry_safe=True)


def retry(job_id: int, actor: str | None = None) -> Operation[Job]:
    """Queue a failed or cancelled job again with fresh attempts (a job with parents waits, with a
    recounted pending_parents, for those not finished yet), recorded in pgq.job_audit with `actor`
    (None: not named) and the database role; raises NotFound, or InvalidState when it is not
    failed/cancelled or another active job holds its dedupe key."""
    _check_id(job_id)
    named = check_actor(actor)

    def steps() -> Steps[Job]:
        try:
            rows = yield Stmt("job_retry", {"id": job_id, "actor": named})
        except pg_errors.UniqueViolation as exc:
            detail = CONSTRAINT_MESSAGES.get(exc.diag.constraint_name or "", "unique violation")
            raise InvalidState(job_id, "failed or cancelled", "retry", detail) from None
        if rows:
            return Job.from_row(rows[0])
        current = yield from _get(job_id)
        raise InvalidState(job_id, current.status.value, "retry")

    return Operation("job_retry", steps)


def get(job_id: int, *, decoded: bool = True) -> Operation[Job | None]:
    """Read one job, or None. With `decoded` (the default) raises pgq.bounds.UndecodableJob for a
    stored job whose payload, result or progress cannot be decoded (see pgq.bounds); without, such
    a job comes back with a pgq.bounds.Undecodable in those fields (the dashboard shows it)."""
    _check_id(job_id)

    def steps() -> Steps[Job | None]:
        rows = yield Stmt("job_get", {"id": job_id})
        if not rows:
            return None
        job = _job_with_raises(rows[0])
        return checked(job) if decoded else job

    return Operation("job_get", steps, retry_safe=True)


def _get(job_id: int) -> Steps[Job]:
    rows = yield Stmt("job_get", {"id": job_id})
    if not rows:
        raise NotFound(job_id)
    return _job_with_raises(rows[0])


def _job_with_raises(row: Mapping[str, Any]) -> Job:
    """A row of job_get: the input watermark counts the raises of the job's key not applied yet."""
    raised = row.get("raised_watermark")
    if raised is None or (row["input_watermark"] is not None and row["input_watermark"] >= raised):
        return Job.from_row(row)
    return Job.from_row({**row, "input_watermark": raised})


def list_jobs(
    *,
    status: str | JobStatus | None,
    queue: str | None,
    kind: str | None,
    limit: int,
    before_id: int | None,
) -> Operation[list[Job]]:
    """Jobs matching the filters, newest first; raises InvalidJob for an unknown status."""
    parsed = None if status is None else JobStatus.parse(status).value
    _check_limit(limit)
    params = {"status": parsed, "queue": queue, "kind": kind, "limit": limit, "before_id": before_id}

    def steps() -> Steps[list[Job]]:
        rows = yield Stmt("job_list", params)
        return [Job.from_row(row) for row in rows]

    return Operation("job_list", steps, retry_safe=True)


def _check_limit(limit: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidJob(f"limit must be an int in [1, 100000], got {limit!r}")


DEPENDENCIES_LIMIT = 1000
"""How many parents and how many children `dependencies` returns unless told otherwise."""


def dependencies(job_id: int, *, limit: int = DEPENDENCIES_LIMIT) -> Operation[Dependencies]:
    """Job `job_id`'s parents and children (sql/job_dependencies.sql, one statement): at most `limit`
    of each (1..100000), lowest ids first, with how many there are in all. Raises NotFound for an
    unknown id, InvalidJob for an id that is not an int or a limit out of range."""
    _check_id(job_id)
    _check_limit(limit)

    def steps() -> Steps[Dependencies]:
        rows = yield Stmt("job_dependencies", {"id": job_id, "limit": limit})
        found = Dependencies.from_rows(rows)
        if found is None:
            raise NotFound(job_id)
        return found

    return Operation("job_dependencies", steps, retry_safe=True)


PURGE_BATCH = 5000

PARTITIONS_AHEAD = 7
"""Days of partitions of the finished jobs that `pgq purge` and the workers' maintenance make ahead
(pgq.finished_partitions_ensure): acknowledgements never land in the default partition while either
runs at least weekly."""

PARTITION_LOCK_WAIT_S = 1.0
"""How long the drop of one day partition waits for each lock (lock_timeout); acknowledgements of
jobs wait behind it for as long, at most."""

PARTITION_TRIES = 3
"""How many times a day partition whose lock was not granted is tried before it is left to the row
deletes (and reported as skipped)."""


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge did: the day partitions it dropped whole (name, jobs), those it could not drop
    (name, why: "held" when a failed job in it holds its sequence, "busy" when its lock was not granted
    in PARTITION_TRIES tries; the row deletes took their other jobs), the jobs it deleted row by row,
    and the partitions it made ahead."""

    dropped: tuple[tuple[str, int], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    deleted: int = 0
    created: int = 0

    @property
    def jobs(self) -> int:
        """Every job the purge removed: those of the dropped partitions and those deleted by row."""
        return self.deleted + sum(n for _, n in self.dropped)


class PartitionDrops:
    """The order in which a retention run tries the day partitions past its horizon: the oldest first,
    each until it is dropped or held, or busy PARTITION_TRIES times. Feed it each call's row with
    `record` and ask `after` for the next call's argument; `done` says when no partition is left."""

    def __init__(self) -> None:
        self.after = ""
        self.done = False
        self.dropped: list[tuple[str, int]] = []
        self.skipped: list[tuple[str, str]] = []
        self._tries = 0

    def record(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Take the outcome of one pgq.finished_partitions_drop call (no row: none is left)."""
        if not rows:
            self.done = True
            return
        row = rows[0]
        name, outcome = str(row["partition"]), str(row["outcome"])
        if outcome == "busy":
            self._tries += 1
            if self._tries < PARTITION_TRIES:
                return  # the same one again
            self.skipped.append((name, outcome))
        elif outcome == "dropped":
            self.dropped.append((name, int(row["jobs"])))
        else:
            self.skipped.append((name, outcome))
        self._tries = 0
        self.after = name


def partition_drop_stmt(older_than_s: float, after: str) -> Stmt:
    """The call of pgq.finished_partitions_drop for the oldest day partition after `after`."""
    return Stmt("finished_partitions_drop",
                {"older_than_s": older_than_s, "after": after, "lock_wait_s": PARTITION_LOCK_WAIT_S})


def partitions_ensure_stmt(days: int = PARTITIONS_AHEAD) -> Stmt:
    """The call of pgq.finished_partitions_ensure: the partitions of today and `days` days ahead."""
    return Stmt("finished_partitions_ensure", {"days": days})


def purge(older_than: dt.timedelta | float, batch: int | None = None) -> Operation[int]:
    """Remove the jobs finished longer than `older_than` ago (see `purge_report`); returns how many."""
    op = purge_report(older_than, batch)

    def steps() -> Steps[int]:
        report = yield from op.steps()
        return report.jobs

    return Operation("job_purge", steps, retry_safe=True)


def purge_report(older_than: dt.timedelta | float, batch: int | None = None) -> Operation[PurgeReport]:
    """Retention: make the day partitions of the coming PARTITIONS_AHEAD days that are missing; drop
    every day partition of finished jobs whose whole UTC day ended `older_than` ago or earlier (each
    its own short transaction, sql/finished_partitions_drop.sql); then delete what is left past the
    horizon row by row, `batch` rows per transaction (None: PURGE_BATCH), until none is left (the
    partition of the jobs finished before revision 0033, the default one, the day across the horizon,
    and the days not dropped). Retry-safe (removing what is gone removes nothing)."""
    size = PURGE_BATCH if batch is None else batch
    seconds = delay_seconds(older_than)  # timedelta(0) or 0: every finished job
    if not seconds >= 0:
        raise InvalidJob(f"older_than must be >= 0, got {older_than!r}")

    def steps() -> Steps[PurgeReport]:
        rows = yield partitions_ensure_stmt()
        created = int(rows[0]["created"])
        drops = PartitionDrops()
        while not drops.done:
            drops.record((yield partition_drop_stmt(seconds, drops.after)))
        total = 0
        while True:
            deleted: int = yield Stmt("job_purge", {"older_than_s": seconds, "batch": size}, fetch="rowcount")
            total += deleted
            if deleted == 0:
                return PurgeReport(tuple(drops.dropped), tuple(drops.skipped), total, created)

    return Operation("job_purge", steps, retry_safe=True)


def _limit_change(limit: str, kind: str, change: Stmt, now: dict[str, Any] | None, actor: str | None, *,
                  marks: bool) -> Operation[bool]:
    """`change` (the set or removal of the `limit` of `kind`, to `now`: the limits set, None: removed)
    after its record in pgq.control_audit (sql/limit_audit.sql: only a change, and only by a role that
    may write the audit: sql/limit_audit_allowed.sql), in one transaction. With `marks`, a removal or
    a limit new to the kind then marks or unmarks the kind's queued jobs (pgq.limits_changed) in a
    transaction of its own: a claim corrects any job it left out. Returns whether it marked."""
    named = check_actor(actor)
    audit = Stmt("limit_audit", {"limit": limit, "kind": kind, "actor": named,
                                 "new": None if now is None else json.dumps(now)}, fetch="none")

    def steps() -> Steps[bool]:
        allowed = yield Stmt("limit_audit_allowed", {}, fetch="tuples")
        if allowed[0][0]:
            yield audit
        rows = yield change
        return marks and (change.fetch == "none" or bool(rows[0][0]))  # removed, or new to the kind

    def marked() -> Steps[bool]:
        yield Stmt("limits_changed", {"kind": kind}, fetch="none")
        return True

    def then(changed: bool) -> Operation[bool] | None:
        return Operation("limits_changed", marked, retry_safe=True) if changed else None

    return Operation(change.name, steps, transaction=True, retry_safe=True, then=then)


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not kind:
        raise InvalidJob("kind must be a non-empty str")
    return kind


def set_concurrency_limit(kind: str, limit: int | None, actor: str | None = None) -> Operation[bool]:
    """Set (or with None remove) the running-jobs limit of `kind`. Creating or removing a limit also
    marks or unmarks the kind's queued jobs (pgq.limits_changed) in a second transaction; a claim
    corrects any job it left out. A change is recorded in pgq.control_audit with `actor` when the
    role may write it (see `_limit_change`)."""
    _check_kind(kind)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidJob(f"concurrency limit must be an int >= 1 or None, got {limit!r}")
    if limit is None:
        return _limit_change("concurrency_limit", kind, Stmt("concurrency_limit_delete", {"kind": kind}, fetch="none"),
                             None, actor, marks=True)
    check_int4("concurrency limit", limit)
    return _limit_change("concurrency_limit", kind,
                         Stmt("concurrency_limit_set", {"kind": kind, "max_running": limit}, fetch="tuples"),
                         {"max_running": limit}, actor, marks=True)


_RATE_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
               "h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}


def parse_rate(rate: str | tuple[int, float]) -> tuple[int, float]:
    """A rate limit as (max_starts, per seconds): "100/s", "5/min", "1000/h", "10/2s", or a tuple
    (max_starts, seconds). Raises InvalidJob for anything else (a window over one day included)."""
    if isinstance(rate, tuple) and len(rate) == 2:
        count, per = rate
    elif isinstance(rate, str) and rate.count("/") == 1:
        head, _, tail = rate.replace(" ", "").partition("/")
        number = tail.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = tail[len(number):]
        try:
            count, per = int(head), (float(number) if number else 1.0) * _RATE_UNITS[unit]
        except (ValueError, KeyError):
            raise InvalidJob(f"rate limit must look like '100/s', '5/min' or '1000/h', got {rate!r}") from None
    else:
        raise InvalidJob(f"rate limit must look like '100/s', '5/min' or '1000/h', got {rate!r}")
    if (isinstance(count, bool) or not isinstance(count, int) or count < 1
            or isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per <= 86400):
        raise InvalidJob(f"rate limit needs a whole number >= 1 per a window of up to a day, got {rate!r}")
    check_int4("rate limit's count", count)
    return count, float(per)


def set_rate_limit(kind: str, rate: str | tuple[int, float] | None, actor: str | None = None) -> Operation[bool]:
    """Set (or with None remove) the global rate limit of `kind`: see `parse_rate`. Marks the kind's
    jobs and records the change as `set_concurrency_limit` does."""
    _check_kind(kind)
    if rate is None:
        return _limit_change("rate_limit", kind, Stmt("rate_limit_delete", {"kind": kind}, fetch="none"), None,
                             actor, marks=True)
    count, per_s = parse_rate(rate)
    return _limit_change("rate_limit", kind,
                         Stmt("rate_limit_set", {"kind": kind, "max_starts": count, "per_s": per_s}, fetch="tuples"),
                         {"max_starts": count, "per_s": per_s}, actor, marks=True)


def set_group_limits(kind: str, concurrency: int | None, rate: str | tuple[int, float] | None,
                     actor: str | None = None) -> Operation[bool]:
    """Set the per-group limits of `kind` (sql/group_limits_set.sql): at most `concurrency` running
    jobs and at most `rate` starts (see `parse_rate`) per group key; both None removes them
    (sql/group_limits_delete.sql). Recorded as `set_concurrency_limit` records a change; no job needs
    marking (grouped jobs are always claimed through the limited path). Raises InvalidJob for a bad
    kind, concurrency or rate."""
    _check_kind(kind)
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise InvalidJob(f"group concurrency must be an int >= 1 or None, got {concurrency!r}")
    if concurrency is not None:
        check_int4("group concurrency", concurrency)
    parsed = None if rate is None else parse_rate(rate)
    if concurrency is None and parsed is None:
        return _limit_change("group_limits", kind, Stmt("group_limits_delete", {"kind": kind}, fetch="none"), None,
                             actor, marks=False)
    now: dict[str, Any] = {} if concurrency is None else {"max_running": concurrency}
    if parsed is not None:
        now.update(max_starts=parsed[0], per_s=parsed[1])
    return _limit_change("group_limits", kind,
                         Stmt("group_limits_set", {"kind": kind, "max_running": concurrency,
                                                   "max_starts": None if parsed is None else parsed[0],
                                                   "per_s": None if parsed is None else parsed[1]}, fetch="none"),
                         now, actor, marks=False)


def is_dirty(queue: str, dedupe_key: str) -> Operation[bool]:
    """Whether the key has an active job, i.e. input not yet processed by a successful run."""

    def steps() -> Steps[bool]:
        rows = yield Stmt("key_is_dirty", {"queue": queue, "dedupe_key": dedupe_key})
        return bool(rows[0]["dirty"])

    return Operation("key_is_dirty", steps, retry_safe=True)


UNKNOWN_KINDS_CAP = 10_000
"""How many queued jobs of one queue and kind sql/queue_unknown_kinds.sql counts at most: beyond it a
pair is reported at the cap and marked capped ("more than 10,000"), so the count costs at most that
many index entries per pair on every overview refresh and metrics scrape (issue #44)."""


def unknown_kinds(cap: int = UNKNOWN_KINDS_CAP) -> Steps[tuple[dict[str, dict[str, int]], dict[str, list[str]]]]:
    """({queue: {kind: queued jobs}}, {queue: [kinds counted only up to `cap`]}) of the kinds no live
    worker of the queue knows, and of jobs an older worker handed back for their kind
    (sql/queue_unknown_kinds.sql); queues without any left out of both. A count is exact below `cap`;
    a kind with more jobs has `cap` and is listed in the second dict (sorted)."""
    unknown: dict[str, dict[str, int]] = {}
    capped: dict[str, list[str]] = {}
    for row in (yield Stmt("queue_unknown_kinds", {"cap": cap})):
        unknown.setdefault(row["queue"], {})[row["kind"]] = int(row["jobs"])
        if row["capped"]:
            capped.setdefault(row["queue"], []).append(row["kind"])
    return unknown, capped


def queue_stats() -> Operation[list[dict[str, Any]]]:
    """Rows of the pgq.queue_stats view, each with `unknown_kinds` added: {kind: number of queued
    jobs} that no live worker of the queue has a task for, or that an older worker handed back for
    that reason (empty when none; sql/queue_unknown_kinds.sql), each counted up to UNKNOWN_KINDS_CAP;
    and `unknown_kinds_capped`: the kinds whose count stopped at the cap (they have more jobs)."""

    def steps() -> Steps[list[dict[str, Any]]]:
        rows = yield Stmt("queue_stats", {})
        unknown, capped = yield from unknown_kinds()
        return [{**row, "unknown_kinds": unknown.get(row["queue"], {}),
                 "unknown_kinds_capped": capped.get(row["queue"], [])} for row in rows]

    # One transaction: one snapshot for both statements, and transaction_guard.sql's jit = off (the
    # unknown kinds' plan is costed over the JIT threshold; compiling it cost some 290 ms a run).
    return Operation("queue_stats", steps, transaction=True, retry_safe=True)


def pause(queue: str, actor: str | None = None) -> Operation[bool]:
    """Pause `queue`: once this returns no worker claims its jobs (enqueue still works, running jobs
    finish). True if it was running, False if it was paused already. Idempotent. A pause that
    changed the state records `actor` (None: the database role) as who paused it, with the role
    (pgq.paused_queues, pgq.control_audit)."""
    name = _queue_name(queue)
    named = check_actor(actor)

    def steps() -> Steps[bool]:
        rows = yield Stmt("queue_pause", {"queue": name, "actor": named})
        return bool(rows[0]["changed"])

    return Operation("queue_pause", steps, retry_safe=True)


def resume(queue: str, actor: str | None = None) -> Operation[bool]:
    """Resume a paused `queue` and wake idle workers; True if it was paused. Idempotent. A resume that
    changed the state is recorded in pgq.control_audit with `actor` (None: not named) and the role."""
    name = _queue_name(queue)
    named = check_actor(actor)

    def steps() -> Steps[bool]:
        rows = yield Stmt("queue_resume", {"queue": name, "actor": named})
        return bool(rows[0]["changed"])

    return Operation("queue_resume", steps, retry_safe=True)


def queue_backlog(queues: Sequence[str] | None) -> Operation[list[dict[str, Any]]]:
    """Rows of the pgq.queue_backlog view for `queues` (None: all): per queue ready, scheduled,
    running, expired_leases and oldest_ready_age_s (seconds, None when nothing is ready), and
    live_workers (registered live workers claiming from it, sql/queue_live_workers.sql), and
    unknown_kinds ({kind: queued jobs} that no live worker of the queue knows) with
    unknown_kinds_capped, as `queue_stats` has them. A queue of `queues` without jobs has a row of zeros."""
    queue_list = _text_list("queues", queues)

    def steps() -> Steps[list[dict[str, Any]]]:
        rows = {row["queue"]: dict(row) for row in (yield Stmt("queue_backlog", {"queues": queue_list}))}
        for name in queue_list or ():
            rows.setdefault(name, {"queue": name, "ready": 0, "scheduled": 0, "running": 0, "expired_leases": 0,
                                   "oldest_ready_age_s": None})
        live = yield Stmt("queue_live_workers", {"queues": sorted(rows)})
        for row in live:
            rows[row["queue"]]["live_workers"] = int(row["live_workers"])
        unknown, capped = yield from unknown_kinds()
        for name, row in rows.items():
            row["unknown_kinds"] = unknown.get(name, {})
            row["unknown_kinds_capped"] = capped.get(name, [])
        return [rows[name] for name in sorted(rows)]

    return Operation("queue_backlog", steps, transaction=True, retry_safe=True)  # as queue_stats
