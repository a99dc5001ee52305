"""What operators read about a running system: the worker registry (`WorkerInfo`), why a job is not
running (`Explanation`, `Reason`), and what a bulk action did (`BulkResult`)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict

from .models import JSON, JobStatus

__all__ = ["REASONS", "BulkResult", "Explanation", "JobFilters", "Reason", "WorkerInfo"]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One row of the worker registry (`pgq.workers`), as `Queue.workers()` reads it.

    `queues`: the queues it claims from (None: every queue); `kinds`: the kinds it has handlers for;
    `slots`: its concurrency; `state`: "running" or "draining"; `live`: it refreshed its row recently
    enough (`pgq.worker_live`), otherwise it is stale and will be pruned; `running`: ids of the jobs it
    runs now (at most 100, lowest first), `running_count` counts them all."""

    id: uuid.UUID
    claimed_by: str
    host: str
    pid: int
    queues: tuple[str, ...] | None
    kinds: tuple[str, ...]
    slots: int
    lease_s: float
    started_at: dt.datetime
    last_seen: dt.datetime
    version: str
    state: str
    live: bool
    running_count: int
    running: tuple[int, ...]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerInfo:
        """Build from a row of sql/worker_list.sql."""
        queues = row["queues"]
        return cls(row["id"], row["claimed_by"], row["host"], int(row["pid"]),
                   None if queues is None else tuple(queues), tuple(row["kinds"]), int(row["slots"]),
                   float(row["lease_s"]), row["started_at"], row["last_seen"], row["version"], row["state"],
                   bool(row["live"]), int(row["running_count"]), tuple(row["running"]))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (id as text, times in ISO 8601)."""
        return {"id": str(self.id), "claimed_by": self.claimed_by, "host": self.host, "pid": self.pid,
                "queues": None if self.queues is None else list(self.queues), "kinds": list(self.kinds),
                "slots": self.slots, "lease_s": self.lease_s, "started_at": self.started_at.isoformat(),
                "last_seen": self.last_seen.isoformat(), "version": self.version, "state": self.state,
                "live": self.live, "running_count": self.running_count, "running": list(self.running)}


REASONS: Final = ("finished", "running", "scheduled", "sequence_held", "waiting_for_parents", "queue_paused",
                  "concurrency_limit_full", "rate_limit_full", "group_concurrency_limit_full",
                  "group_rate_limit_full", "no_live_worker", "unknown_kind", "ready")
"""The reason codes of `pgq.explain`, in the order it reports them (see sql/functions/explain.sql;
"sequence_held", a job waiting on its sequence's previous job, "held by job N", and the two full group
limits of a grouped job are revision 0017's)."""


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a job is not running: `code` (one of REASONS), `detail` (the sentence
    `pgq.explain` writes) and `facts` (its data: times as ISO 8601 text, ids as ints)."""

    code: str
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why job `job_id` is not running now (`Queue.explain`), read in one snapshot by `pgq.explain`.

    `reasons` in pgq.explain's order; a job that is claimable now has exactly one, "ready" (with its
    `position` in its queue's claim order). `status` is the job's status at that moment."""

    job_id: int
    status: JobStatus
    reasons: tuple[Reason, ...]

    @property
    def codes(self) -> tuple[str, ...]:
        """The reasons' codes."""
        return tuple(r.code for r in self.reasons)

    def reason(self, code: str) -> Reason | None:
        """The reason with `code`, or None."""
        return next((r for r in self.reasons if r.code == code), None)

    @classmethod
    def from_rows(cls, job_id: int, rows: Iterable[Mapping[str, Any]]) -> Explanation | None:
        """Build from the rows of sql/job_explain.sql; None when there are none (no such job)."""
        rows = list(rows)
        if not rows:
            return None
        return cls(job_id, JobStatus(rows[0]["status"]),
                   tuple(Reason(r["reason"], r["detail"], dict(r["facts"] or {})) for r in rows))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: job_id, status and the reasons (code, detail, facts)."""
        return {"job_id": self.job_id, "status": self.status.value,
                "reasons": [{"code": r.code, "detail": r.detail, "facts": r.facts} for r in self.reasons]}


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk action (`Queue.cancel_where` / `retry_where` / `delete_where`) did: `matched`
    jobs matched the filters when their batch was read, `changed` of them were changed (the others
    changed state meanwhile, or for a retry held a dedupe key another active job holds), in
    `batches` transactions. With `dry_run`, `matched` is the count and nothing changed."""

    action: str
    matched: int
    changed: int
    batches: int
    dry_run: bool = False


class JobFilters(TypedDict, total=False):
    """The filters of the bulk actions (`Queue.retry_where` says what each matches), as keywords."""

    queue: str | None
    kind: str | None
    status: str | JobStatus | Iterable[str | JobStatus] | None
    error: str | None
    payload: JSON
    created_after: dt.datetime | None
    created_before: dt.datetime | None
    finished_after: dt.datetime | None
    finished_before: dt.datetime | None
