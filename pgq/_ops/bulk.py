"""Bulk actions: cancel, retry or delete every job matching filters, in bounded batches.

A run reads the matching ids a batch at a time, lowest first, from after the last id of the previous
batch (sql/job_select_where.sql: no lock, one pass over the table), and hands each batch to the
action's statement (sql/job_<action>_many.sql), which locks and re-checks the rows in id order in a
short transaction of its own and records the batch in pgq.job_audit. No transaction holds more than
one batch of rows; a run that stops midway (connection lost) leaves its finished batches done, and
running it again finds only what is left: safe to re-run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

from ..bounds import has_lone_surrogate
from ..errors import InvalidJob
from ..insight import BulkResult
from ..models import ACTIVE, FINISHED, JSON, JobStatus, encode_json
from .core import Operation, Steps, Stmt, check_actor

BulkAction = Literal["cancel", "retry", "delete"]

BULK_BATCH: Final = 1000
"""Jobs per batch (per transaction) unless told otherwise."""

BULK_STATUSES: Final[dict[str, tuple[JobStatus, ...]]] = {
    "cancel": ACTIVE,
    "retry": (JobStatus.FAILED, JobStatus.CANCELLED),
    "delete": FINISHED,
}
"""The statuses each action applies to (and its default status filter)."""

ERROR_LINE_CHARS: Final = 200
"""How much of an error's first line tells its dead-letter group (sql/dashboard_failed_groups.sql)."""


def is_error_line(value: object) -> TypeGuard[str]:
    """Whether `value` can be a dead-letter group's error line: a str of one line (no newline, no NUL)
    of at most ERROR_LINE_CHARS characters; "" (the group of jobs without error text) is one."""
    return isinstance(value, str) and "\x00" not in value and "\n" not in value and len(value) <= ERROR_LINE_CHARS


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The filters of a bulk action, each None for "any": `queue` and `kind` equal; `status` one or
    several statuses within those the action applies to; `error` a case-insensitive substring of
    the job's last error; `payload` a JSON value the payload contains (jsonb `@>`); created and
    finished ranges (after <= t < before, timezone-aware datetimes); `error_line` the first line of
    the last error, its first ERROR_LINE_CHARS characters, equal to this ("" for no error text): one
    group of the dashboard's dead letters (sql/dashboard_failed_groups.sql); `text` a case-insensitive
    substring of the kind, the dedupe key or the last error (the dashboard's search text, matched as
    its job list matches it)."""

    queue: str | None = None
    kind: str | None = None
    status: str | JobStatus | Iterable[str | JobStatus] | None = None
    error: str | None = None
    payload: JSON = None
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    finished_after: dt.datetime | None = None
    finished_before: dt.datetime | None = None
    error_line: str | None = None
    text: str | None = None

    def params(self, action: BulkAction) -> dict[str, Any]:
        """The filter's parameters of sql/job_select_where.sql for `action`; raises InvalidJob for a
        bad filter (nothing is sent then)."""
        for name in ("queue", "kind", "error", "text"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or "\x00" in value
                                      or has_lone_surrogate(value)):
                raise InvalidJob(f"{name} must be a non-empty str of UTF-8 text, got {value!r}")
        for name in ("created_after", "created_before", "finished_after", "finished_before"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, dt.datetime) or value.tzinfo is None):
                raise InvalidJob(f"{name} must be a timezone-aware datetime, got {value!r}")
        line = self.error_line
        if line is not None and not is_error_line(line):
            raise InvalidJob(f"error_line must be one line of at most {ERROR_LINE_CHARS} characters, got {line!r}")
        return {
            "statuses": [s.value for s in self.statuses(action)],
            "queue": self.queue, "kind": self.kind, "error": self.error, "text": self.text,
            "payload": None if self.payload is None else encode_json("payload", self.payload, None),
            "created_after": self.created_after, "created_before": self.created_before,
            "finished_after": self.finished_after, "finished_before": self.finished_before,
            "error_line": line,
        }

    def statuses(self, action: BulkAction) -> tuple[JobStatus, ...]:
        """The statuses `action` will touch: the filter's, which must be among BULK_STATUSES[action], or
        all of those."""
        allowed = BULK_STATUSES[action]
        if self.status is None:
            return allowed
        given = [self.status] if isinstance(self.status, str | JobStatus) else list(self.status)
        parsed = tuple(dict.fromkeys(JobStatus.parse(s) for s in given))
        wrong = [s.value for s in parsed if s not in allowed]
        if not parsed or wrong:
            raise InvalidJob(f"{action} applies to jobs in status {', '.join(s.value for s in allowed)}; "
                             f"got {', '.join(wrong) or 'no status'}")
        return parsed

    def describe(self, action: BulkAction) -> dict[str, Any]:
        """The filters as the audit records them (only those given, times in ISO 8601)."""
        shown: dict[str, Any] = {"status": [s.value for s in self.statuses(action)]}
        for name in ("queue", "kind", "error", "text", "payload", "created_after", "created_before",
                     "finished_after", "finished_before", "error_line"):
            value = getattr(self, name)
            if value is not None:
                shown[name] = value.isoformat() if isinstance(value, dt.datetime) else value
        return shown


def _after(action: BulkAction, ids: list[int]) -> Steps[None]:
    # A cancelled batch's dependents and waiters (pgq.after_finish); were this lost, the workers'
    # settle step (each second) would do it.
    if action == "cancel":
        yield Stmt("job_after_finish", {"ids": ids}, fetch="none")


def given_filter(action: BulkAction, filters: Mapping[str, Any], *, dry_run: bool) -> JobFilter:
    """The JobFilter of the keyword `filters` of `Queue.<action>_where`. Raises InvalidJob when none
    is given (each None) unless `dry_run`: acting on every job must be asked for, with `status`, as
    `pgq jobs <action>` asks for it."""
    where = JobFilter(**filters)
    if not dry_run:
        require_filter(action, where, f"{action}_where")
    return where


def require_filter(action: BulkAction, where: JobFilter, caller: str) -> None:
    """Raise InvalidJob when `where` has no filter at all (every field None): acting on every job
    must be asked for with `status`. `caller` names the API in the message. The one rule of
    `Queue.<action>_where`, `pgq jobs <action>` and the dashboard's bulk actions."""
    if all(getattr(where, f.name) is None for f in dataclasses.fields(where)):
        raise InvalidJob(unfiltered_message(action, caller))


def unfiltered_message(action: BulkAction, caller: str) -> str:
    """What `require_filter` says when `caller` got no filter for `action`."""
    statuses = ", ".join(repr(s.value) for s in BULK_STATUSES[action])
    return (f"{caller} needs at least one filter (queue=, kind=, status=, ...); to {action} every job it "
            f"applies to, say so with status=[{statuses}]")


def bulk(action: BulkAction, where: JobFilter, *, batch: int = BULK_BATCH, dry_run: bool = False,
         actor: str | None = None, progress: Callable[[BulkResult], None] | None = None) -> Operation[BulkResult]:
    """Apply `action` to every job matching `where`, `batch` jobs per transaction (1..10000); with
    `dry_run`, only count them (no write). `actor`: who asked, recorded in pgq.job_audit with the
    database role. `progress(result so far)` is called after each batch. Raises InvalidJob for a
    bad filter or batch before anything is sent."""
    if action not in BULK_STATUSES:
        raise InvalidJob(f"unknown bulk action {action!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
        raise InvalidJob(f"batch must be an int in [1, 10000], got {batch!r}")
    actor = check_actor(actor)
    # A dry run only reads: the biggest batches, so fewer round trips (a count over a big table).
    params = {**where.params(action), "batch": 10_000 if dry_run else batch}
    recorded = {"actor": actor, "filters": json.dumps(where.describe(action))}

    def steps() -> Steps[BulkResult]:
        after, matched, changed, batches = 0, 0, 0, 0
        while True:
            rows = yield Stmt("job_select_where", {**params, "after_id": after})
            ids = [int(r["id"]) for r in rows]
            if ids:
                matched += len(ids)
                after = ids[-1]
                if not dry_run:
                    done = yield Stmt(f"job_{action}_many", {"ids": ids, **recorded})
                    changed += int(done[0]["changed"])
                    yield from _after(action, ids)
                    batches += 1
                if progress is not None:
                    progress(BulkResult(action, matched, changed, batches, dry_run))
            if len(ids) < params["batch"]:
                return BulkResult(action, matched, changed, batches, dry_run)

    return Operation(f"job_{action}_many", steps)


def bulk_count(action: BulkAction, where: JobFilter, *, batch: int, budget_s: float) -> Operation[tuple[int, bool]]:
    """Count the jobs `action` applies to that match `where`, `batch` per statement, lowest ids first,
    starting no statement that would end (taking as long as the last one did) more than `budget_s`
    seconds after the first began. Returns (count, complete); complete False: at least that many."""
    params = {**where.params(action), "batch": batch}

    def steps() -> Steps[tuple[int, bool]]:
        after, matched = 0, 0
        started = time.monotonic()
        while True:
            statement_started = time.monotonic()
            rows = yield Stmt("job_select_where", {**params, "after_id": after})
            matched += len(rows)
            if len(rows) < batch:
                return matched, True
            after = int(rows[-1]["id"])
            ended = time.monotonic()
            if ended - started + (ended - statement_started) > budget_s:
                return matched, False

    return Operation("job_select_where", steps, retry_safe=True)


BULK_IDS_MAX: Final = 1000
"""Most ids `bulk_ids` takes (one batch)."""


def bulk_ids(action: BulkAction, ids: Iterable[int], *, actor: str | None = None) -> Operation[BulkResult]:
    """Apply `action` to the jobs `ids` (at most BULK_IDS_MAX, in one transaction) that are in a status
    it applies to; the others are left as they are. Recorded in pgq.job_audit like `bulk`."""
    if action not in BULK_STATUSES:
        raise InvalidJob(f"unknown bulk action {action!r}")
    chosen = sorted(set(ids))
    if not chosen or len(chosen) > BULK_IDS_MAX or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**63 for i in chosen):
        raise InvalidJob(f"give 1..{BULK_IDS_MAX} job ids")
    params = {"ids": chosen, "actor": check_actor(actor), "filters": json.dumps({"ids": chosen})}

    def steps() -> Steps[BulkResult]:
        done = yield Stmt(f"job_{action}_many", params)
        yield from _after(action, chosen)
        return BulkResult(action, len(chosen), int(done[0]["changed"]), 1, False)

    return Operation(f"job_{action}_many", steps)
