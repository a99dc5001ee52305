"""The dashboard's actions: cancel and retry a job, pause and resume a queue, and the bulk actions
(cancel, retry or delete the selected jobs, or all that match the search's filters). The pages' forms
and the API both come here, after their own CSRF checks; the work itself is pgq's client
(AsyncQueue.cancel, .retry, .pause, .resume), so the dashboard changes jobs exactly as the CLI and the
Python API do."""

from __future__ import annotations

import logging
from typing import Literal

from .. import _ops
from ..errors import InvalidState, NotFound
from ..insight import BulkResult
from ..models import Job
from . import queries
from .dashboard import Dashboard
from .errors import HttpError

__all__ = ["BulkAction", "JobAction", "QueueAction", "bulk_action", "bulk_count", "job_action", "pause_all",
           "queue_action"]

JobAction = Literal["cancel", "retry", "run_now"]
QueueAction = Literal["pause", "resume"]
BulkAction = _ops.BulkAction

logger = logging.getLogger("pgq.web")

READ_ONLY = "this dashboard is read-only: it cancels, retries, pauses and resumes nothing (--read-only)"


async def _allowed(dash: Dashboard, action: str) -> None:
    """Raise HttpError(403) when the dashboard is read-only or its database role lacks the right."""
    if dash.current.read_only:
        raise HttpError(403, dash.refusal(READ_ONLY))
    refusal = (await dash.read(queries.rights())).refusal(action)
    if refusal is not None:
        raise HttpError(403, refusal)


def _single(action: JobAction, job_id: int, actor: str) -> _ops.Operation[Job]:
    # pgq's own operation (the one cancel / retry of the CLI and the Python API, or the run-now
    # update), which records itself in pgq.job_audit with `actor` in its own transaction.
    def run_now() -> _ops.Steps[Job]:
        rows = yield _ops.Stmt("dashboard_job_run_now", {"id": job_id, "actor": actor})
        if not rows:
            current = yield from _ops.get(job_id).steps()
            if current is None:
                raise NotFound(job_id)
            raise InvalidState(job_id, current.status.value, "run now", "only a scheduled job (queued, due "
                               "later) can be made due now")
        return Job.from_row(rows[0])

    if action == "run_now":
        return _ops.Operation("dashboard_job_run_now", run_now)
    return _ops.cancel(job_id, actor) if action == "cancel" else _ops.retry(job_id, actor)


def _logged(actor: str, action: str, what: str, **extra: object) -> None:
    logger.info("%s: %s %s", actor, action, what, extra={"event": "dashboard_action", "actor": actor,
                                                        "action": action, **extra})


async def job_action(dash: Dashboard, action: JobAction, job_id: int, *, actor: str | None = None) -> Job:
    """Cancel, retry or run now (make a scheduled job due now) job `job_id`, recording it in
    pgq.job_audit with `actor` (default: the request's, `Dashboard.current.actor`) and the database
    role in the same transaction; return the job as it is after. Raises HttpError 403 (read-only, no right), and pgq's
    NotFound (404) and InvalidState (409: finished already, not failed, not scheduled, or its dedupe key
    held by another job)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    actor = actor or dash.current.actor
    job = await queue._run(_single(action, job_id, actor))
    _logged(actor, action, f"job {job_id}", job_id=job_id)
    return job


def _pause(action: QueueAction, name: str, actor: str) -> _ops.Operation[bool]:
    return _ops.pause(name, actor) if action == "pause" else _ops.resume(name, actor)


async def queue_action(dash: Dashboard, action: QueueAction, name: str, *, actor: str | None = None) -> bool:
    """Pause or resume queue `name`; True if that changed its state. A change is recorded with `actor`
    (default: the request's) and the database role (pgq.control_audit; a pause also in
    pgq.paused_queues), in the same transaction. Raises HttpError 403 (read-only, no right)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    actor = actor or dash.current.actor
    changed = await queue._run(_pause(action, name, actor))
    _logged(actor, action, f"queue {name!r} ({'changed' if changed else 'no change'})", queue=name)
    return changed


async def pause_all(dash: Dashboard, *, actor: str | None = None) -> list[str]:
    """Pause every queue the overview lists that is not paused yet (each in its own transaction,
    attributed to `actor`, default: the request's); return the names of those it paused. Raises
    HttpError 403."""
    await _allowed(dash, "pause")
    names = [q.name for q in (await dash.read(queries.overview())).queues if not q.paused]
    queue = await dash.queue()
    actor = actor or dash.current.actor
    paused = [n for n in names if await queue._run(_pause("pause", n, actor))]
    for name in paused:
        _logged(actor, "pause", f"queue {name!r} (changed)", queue=name)
    return paused


BULK_COUNT_BUDGET_S = 0.1
"""The confirmation page starts no batch of its count that would, taking as long as the last one did,
end past this many seconds (like the job search's SEARCH_BUDGET_S): the page is open to read-only
viewers, and a count over every job of a big table took seconds."""
BULK_COUNT_BATCH = 2000
"""Jobs per statement of that count."""


BULK_CALLER = "the dashboard's bulk action"


def unfiltered(action: BulkAction) -> str:
    """Why `action` may not apply to all jobs matching no filter at all (the rule of
    Queue.cancel_where): the message the POST answers with a 400."""
    return _ops.unfiltered_message(action, BULK_CALLER)


async def bulk_count(dash: Dashboard, action: BulkAction, where: _ops.JobFilter) -> tuple[int, bool]:
    """How many jobs `action` applied to `where` would change now (reads only), and whether that is
    all of them (False: the count stopped at its time budget, BULK_COUNT_BUDGET_S, and there are at
    least that many). Raises pgq's InvalidJob (400) for a filter the action cannot take."""
    queue = await dash.queue()
    return await queue._run(_ops.bulk_count(action, where, batch=BULK_COUNT_BATCH, budget_s=BULK_COUNT_BUDGET_S))


async def bulk_action(dash: Dashboard, action: BulkAction, *, where: _ops.JobFilter | None = None,
                      ids: list[int] | None = None, actor: str | None = None) -> BulkResult:
    """Apply `action` to the jobs `ids` (one transaction), or to every job matching `where` (in
    batches); recorded in pgq.job_audit with `actor` (default: the dashboard's). Raises HttpError 403 (read-only,
    no right) and InvalidJob (400)."""
    await _allowed(dash, action)
    if ids is None:
        assert where is not None
        # The rule of Queue.cancel_where (issue 40): no filter at all is refused, not "every job".
        _ops.require_filter(action, where, BULK_CALLER)
    queue = await dash.queue()
    actor = actor or dash.current.actor
    if ids is not None:
        return await queue._run(_ops.bulk_ids(action, ids, actor=actor))
    assert where is not None
    return await queue._run(_ops.bulk(action, where, actor=actor))
