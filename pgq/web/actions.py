"""The dashboard's actions: cancel and retry a job, pause and resume a queue, and the bulk actions
(cancel, retry or delete the selected jobs, or all that match the search's filters). The pages' forms
and the API both come here, after their own CSRF checks; the work itself is pgq's client
(AsyncQueue.cancel, .retry, .pause, .resume), so the dashboard changes jobs exactly as the CLI and the
Python API do."""

from __future__ import annotations

import logging
from typing import Literal

from .. import _ops
from ..insight import BulkResult
from ..models import Job
from . import queries
from .dashboard import Dashboard
from .errors import HttpError

__all__ = ["BulkAction", "JobAction", "QueueAction", "bulk_action", "bulk_count", "job_action", "queue_action"]

JobAction = Literal["cancel", "retry"]
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


async def job_action(dash: Dashboard, action: JobAction, job_id: int) -> Job:
    """Cancel or retry job `job_id`, recorded in pgq.job_audit with the request's actor; return the
    job as it is after. Raises HttpError 403 (read-only,
    no right), and pgq's NotFound (404) and InvalidState (409: finished already, not failed, or its
    dedupe key held by another job)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    actor = dash.current.actor
    op = _ops.cancel(job_id) if action == "cancel" else _ops.retry(job_id)
    job = await queue._run(_ops.audited(op, action, job_id, actor))
    logger.info("%s: %s job %d", actor, action, job_id, extra={"event": "dashboard_action", "actor": actor,
                                                            "action": action, "job_id": job_id})
    return job


async def queue_action(dash: Dashboard, action: QueueAction, name: str) -> bool:
    """Pause or resume queue `name`; True if that changed its state. Raises HttpError 403 (read-only,
    no right)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    changed = await (queue.pause(name) if action == "pause" else queue.resume(name))
    actor = dash.current.actor
    logger.info("%s: %s queue %r (%s)", actor, action, name, "changed" if changed else "no change",
                extra={"event": "dashboard_action", "actor": actor, "action": action, "queue": name})
    return changed


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
                      ids: list[int] | None = None) -> BulkResult:
    """Apply `action` to the jobs `ids` (one transaction), or to every job matching `where` (in
    batches); recorded in pgq.job_audit with the dashboard's actor. Raises HttpError 403 (read-only,
    no right) and InvalidJob (400)."""
    await _allowed(dash, action)
    if ids is None:
        assert where is not None
        # The rule of Queue.cancel_where (issue 40): no filter at all is refused, not "every job".
        _ops.require_filter(action, where, BULK_CALLER)
    queue = await dash.queue()
    actor = dash.current.actor
    if ids is not None:
        return await queue._run(_ops.bulk_ids(action, ids, actor=actor))
    assert where is not None
    return await queue._run(_ops.bulk(action, where, actor=actor))
