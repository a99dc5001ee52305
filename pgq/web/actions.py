"""The dashboard's four actions: cancel and retry a job, pause and resume a queue. The pages' forms
and the API both come here, after their own CSRF checks; the work itself is pgq's client
(AsyncQueue.cancel, .retry, .pause, .resume), so the dashboard changes jobs exactly as the CLI and the
Python API do."""

from __future__ import annotations

from typing import Literal

from ..models import Job
from . import queries
from .dashboard import Dashboard
from .errors import HttpError

__all__ = ["JobAction", "QueueAction", "job_action", "queue_action"]

JobAction = Literal["cancel", "retry"]
QueueAction = Literal["pause", "resume"]

READ_ONLY = "this dashboard is read-only: it cancels, retries, pauses and resumes nothing (--read-only)"


async def _allowed(dash: Dashboard, action: str) -> None:
    """Raise HttpError(403) when the dashboard is read-only or its database role lacks the right."""
    if dash.settings.read_only:
        raise HttpError(403, READ_ONLY)
    refusal = (await dash.read(queries.rights())).refusal(action)
    if refusal is not None:
        raise HttpError(403, refusal)


async def job_action(dash: Dashboard, action: JobAction, job_id: int) -> Job:
    """Cancel or retry job `job_id`; return the job as it is after. Raises HttpError 403 (read-only,
    no right), and pgq's NotFound (404) and InvalidState (409: finished already, not failed, or its
    dedupe key held by another job)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    if action == "cancel":
        return await queue.cancel(job_id)
    return await queue.retry(job_id)


async def queue_action(dash: Dashboard, action: QueueAction, name: str) -> bool:
    """Pause or resume queue `name`; True if that changed its state. Raises HttpError 403 (read-only,
    no right)."""
    await _allowed(dash, action)
    queue = await dash.queue()
    if action == "pause":
        return await queue.pause(name)
    return await queue.resume(name)
