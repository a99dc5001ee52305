"""Worker and maintenance operations (pgq.worker, pgq.worker.maintenance): the next due job, and
the leader-only rescue, purge, stalled-session and periodic-enqueue runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from ..models import (
    JobSpec,
)
from .admin import PARTITIONS_AHEAD, PURGE_BATCH, partition_drop_stmt, partitions_ensure_stmt
from .core import WRITING_STATEMENTS, Operation, Steps, Stmt, T, _text_list
from .driver import _GUARD_PARAMS
from .jobs import RESCUE_BATCH, enqueue
from .registry import WorkerRow


def next_run_at(queues: Sequence[str] | None) -> Operation[float | None]:
    """Seconds (database clock) until the earliest queued job of `queues` (None: all) is due;
    negative when one is due already, None when nothing is queued."""
    queue_list = _text_list("queues", queues)

    def steps() -> Steps[float | None]:
        rows = yield Stmt("job_next_run_at", {"queues": queue_list})
        seconds = rows[0]["seconds"] if rows else None
        return None if seconds is None else float(seconds)

    return Operation("job_next_run_at", steps, retry_safe=True)


@dataclass(frozen=True, slots=True)
class LeaderRun(Generic[T]):
    """Outcome of a maintenance run: whether it held the step's lock, the database clock at the
    start of its transaction, and the step's value (None when it was not the leader)."""

    leader: bool
    now: dt.datetime
    value: T | None


def _leader(lock_key: str, seen: WorkerRow | None = None) -> Steps[tuple[bool, dt.datetime]]:
    # With `seen`, the same statement refreshes the worker's registry row (maintenance_lock_seen.sql).
    if seen is None:
        rows = yield Stmt("maintenance_lock", {"key": lock_key, **_GUARD_PARAMS})
    else:
        rows = yield Stmt("maintenance_lock_seen", {"key": lock_key, **_GUARD_PARAMS, **seen.params()})
        seen.found = bool(rows[0]["seen"])
    return bool(rows[0]["leader"]), rows[0]["now"]


def rescue_as_leader(
    lock_key: str, limit: int = RESCUE_BATCH, on_failure: Callable[[int, str], Sequence[JobSpec]] | None = None,
    *, seen: WorkerRow | None = None, prune: bool = False,
) -> Operation[LeaderRun[list[tuple[int, str, str, str]]]]:
    """One transaction: take the rescue lock (`pgq.lead(lock_key)`), and when it was
    free, rescue up to `limit` expired attempts. Value: (job id, new status, queue, kind) per job
    rescued. `on_failure(job id, kind)`: the follow-up jobs of a job the rescue failed for good
    (its last attempt expired), enqueued in the same transaction. `seen`: refresh this worker's
    registry row in the lock's statement. `prune`: the leader also prunes stale registry rows."""

    def steps() -> Steps[LeaderRun[list[tuple[int, str, str, str]]]]:
        leader, now = yield from _leader(lock_key, seen)
        if not leader:
            return LeaderRun(False, now, None)
        if prune:
            yield Stmt("worker_prune", {})
        rows = yield Stmt("job_rescue", {"limit": limit})
        rescued = [(row["id"], row["status"], row["queue"], row["kind"]) for row in rows]
        if on_failure is not None:
            specs = [s for job_id, status, _, kind in rescued if status == "failed" for s in on_failure(job_id, kind)]
            if specs:
                yield from enqueue(specs).steps()
        return LeaderRun(True, now, rescued)

    return Operation("job_rescue", steps, transaction=True, guards_itself=True)


@dataclass(frozen=True, slots=True)
class StalledSession:
    """A session ended by `end_stalled_as_leader`: its backend pid, application_name, client address
    ("local" for a unix socket), the pgq statement it was stuck in, and for how long (seconds)."""

    pid: int
    application_name: str
    client: str
    statement: str
    stalled_s: float


def end_stalled_as_leader(lock_key: str, after_s: float, *,
                          seen: WorkerRow | None = None) -> Operation[LeaderRun[list[StalledSession]]]:
    """One transaction: take the rescue lock, and when it was free, end every session of this
    database stuck for more than `after_s` seconds writing the result of one of pgq's writing
    statements to a client that stopped reading (see `stalled_session_end.sql`). Only sessions this
    role may signal are considered. Value: the sessions ended. `seen`: as for `rescue_as_leader`."""

    def steps() -> Steps[LeaderRun[list[StalledSession]]]:
        leader, now = yield from _leader(lock_key, seen)
        if not leader:
            return LeaderRun(False, now, None)
        rows = yield Stmt("stalled_session_end", {"after_s": after_s, "statements": list(WRITING_STATEMENTS)})
        return LeaderRun(True, now, [
            StalledSession(r["pid"], r["application_name"], r["client"], r["statement"], r["stalled_s"])
            for r in rows if r["ended"]])

    return Operation("stalled_session_end", steps, transaction=True, guards_itself=True)


SETTLE_BATCH = 1000


def settle(limit: int = SETTLE_BATCH) -> Operation[int]:
    """Release the waiting children and tell the waiters of jobs that finished before the edge or the
    wait was committed (their producer's transaction was open): up to `limit` of each. Value: how many
    were settled (0 when another settle was running). Idempotent."""

    def steps() -> Steps[int]:
        rows = yield Stmt("job_settle", {"limit": limit})
        return int(rows[0]["settled"])

    return Operation("job_settle", steps, retry_safe=True)


def purge_as_leader(lock_key: str, older_than_s: float, batch: int = PURGE_BATCH) -> Operation[LeaderRun[int]]:
    """One transaction: take the retention lock, and when it was free, delete one batch of jobs that
    finished more than `older_than_s` seconds ago. Value: the number deleted."""

    def steps() -> Steps[LeaderRun[int]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        deleted: int = yield Stmt("job_purge", {"older_than_s": older_than_s, "batch": batch}, fetch="rowcount")
        return LeaderRun(True, now, deleted)

    return Operation("job_purge", steps, transaction=True, retry_safe=True, guards_itself=True)


def partition_drop_as_leader(lock_key: str, older_than_s: float,
                             after: str) -> Operation[LeaderRun[list[dict[str, Any]]]]:
    """One transaction: take the retention lock, and when it was free, drop the oldest day partition of
    the finished jobs after `after` whose day ended `older_than_s` seconds ago or earlier
    (sql/finished_partitions_drop.sql). Value: its row (partition, outcome, jobs), none when no such
    partition is left."""

    def steps() -> Steps[LeaderRun[list[dict[str, Any]]]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        rows = yield partition_drop_stmt(older_than_s, after)
        return LeaderRun(True, now, list(rows))

    return Operation("finished_partitions_drop", steps, transaction=True, retry_safe=True, guards_itself=True)


def partitions_ensure(days: int = PARTITIONS_AHEAD) -> Operation[int]:
    """Make the missing day partitions of the finished jobs from today to `days` days ahead
    (pgq.finished_partitions_ensure: idempotent, one caller at a time). Value: how many were made."""

    def steps() -> Steps[int]:
        rows = yield partitions_ensure_stmt(days)
        return int(rows[0]["created"])

    return Operation("finished_partitions_ensure", steps, retry_safe=True)


def periodic_enqueue_as_leader(
    lock_key: str, plan: Callable[[dt.datetime], Sequence[JobSpec]]
) -> Operation[LeaderRun[list[tuple[int, str]]]]:
    """One transaction: take the periodic lock, and when it was free, enqueue the ticks `plan(now)`
    returns (`now`: the database clock) unless a job of the tick exists in any status. The specs
    must carry dedupe keys. Value: (job id, dedupe key) per job created."""

    def steps() -> Steps[LeaderRun[list[tuple[int, str]]]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        specs = plan(now)
        if not specs:
            return LeaderRun(True, now, [])
        params = {
            "kinds": [s.kind for s in specs],
            "payloads": [s.payload_json for s in specs],
            "queues": [s.queue for s in specs],
            "priorities": [s.priority for s in specs],
            "dedupe_keys": [s.dedupe_key for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
        }
        rows = yield Stmt("periodic_enqueue", params)
        return LeaderRun(True, now, [(row["id"], row["dedupe_key"]) for row in rows])

    return Operation("periodic_enqueue", steps, transaction=True, guards_itself=True)


COUNT_RECOUNT_S = 120.0
"""Each pass of the finished-job counts counts the last this many seconds before what was counted
again: a job whose finishing transaction commits up to this long after the previous pass is counted."""

COUNT_SPAN_S = 6 * 3600.0
"""A pass counts at most this many seconds of minutes (the first pass over a long history takes several)."""


def count_finished(recount_s: float = COUNT_RECOUNT_S, span_s: float = COUNT_SPAN_S) -> Operation[dt.datetime | None]:
    """One pass of the finished-job counts (pgq.count_finished, sql/finished_count.sql): counts the
    jobs finished per minute, queue, kind and status into pgq.finished_counts, up to the current minute.
    Value: the end of the minutes counted; None when another worker's pass was running. Idempotent."""

    def steps() -> Steps[dt.datetime | None]:
        rows = yield Stmt("finished_count", {"recount_s": recount_s, "span_s": span_s})
        through: dt.datetime | None = rows[0]["counted_through"]
        return through

    return Operation("finished_count", steps, retry_safe=True)
