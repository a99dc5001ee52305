"""Operations of the worker registry (pgq.workers, revision 0013) and of explaining a job: register,
refresh, unregister and list workers; `explain`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import NotFound
from ..insight import Explanation, WorkerInfo
from .core import Operation, Steps, Stmt, _check_id


@dataclass(slots=True)
class WorkerRow:
    """A worker's registration: its row's id and secret token, and the state to write at the next
    refresh (None: leave it). `found` is set by each refresh: False when the row was pruned."""

    id: uuid.UUID
    token: uuid.UUID
    state: str | None = None
    found: bool = True

    def params(self) -> dict[str, object]:
        """The parameters of worker_seen.sql and maintenance_lock_seen.sql."""
        return {"id": self.id, "token": self.token, "state": self.state}


def worker_register(*, claimed_by: str, host: str, pid: int, queues: Sequence[str] | None, kinds: Sequence[str],
                    slots: int, lease_s: float, refresh_s: float, version: str) -> Operation[WorkerRow]:
    """Add this worker's row to the registry; returns its id and token."""
    params = {"claimed_by": claimed_by, "host": host, "pid": pid,
              "queues": None if queues is None else list(queues), "kinds": sorted(kinds), "slots": slots,
              "lease_s": lease_s, "refresh_s": refresh_s, "version": version}

    def steps() -> Steps[WorkerRow]:
        rows = yield Stmt("worker_register", params)
        return WorkerRow(rows[0]["id"], rows[0]["token"], None)

    return Operation("worker_register", steps)


def worker_seen(row: WorkerRow) -> Operation[bool]:
    """Refresh `row` (and write its state, if set); returns and records whether it still exists."""

    def steps() -> Steps[bool]:
        rows = yield Stmt("worker_seen", row.params())
        row.found = bool(rows[0]["seen"])
        return row.found

    return Operation("worker_seen", steps, retry_safe=True)


def worker_unregister(row: WorkerRow) -> Operation[bool]:
    """Delete `row` (a clean stop); True if it existed."""

    def steps() -> Steps[bool]:
        rows = yield Stmt("worker_unregister", {"id": row.id, "token": row.token})
        return bool(rows[0]["removed"])

    return Operation("worker_unregister", steps, retry_safe=True)


def workers() -> Operation[list[WorkerInfo]]:
    """The registry: every worker row, live ones first, with the jobs each runs."""

    def steps() -> Steps[list[WorkerInfo]]:
        rows = yield Stmt("worker_list", {})
        return [WorkerInfo.from_row(r) for r in rows]

    return Operation("worker_list", steps, retry_safe=True)


def explain(job_id: int) -> Operation[Explanation]:
    """Why job `job_id` is not running now (pgq.explain); raises NotFound for an unknown id."""
    _check_id(job_id)

    def steps() -> Steps[Explanation]:
        rows = yield Stmt("job_explain", {"id": job_id})
        found = Explanation.from_rows(job_id, rows)
        if found is None:
            raise NotFound(job_id)
        return found

    return Operation("job_explain", steps, retry_safe=True)
