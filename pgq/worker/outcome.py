"""What an attempt's end means: the failure policy (retry when, or fail for good) and log fields.

No I/O: `failure` turns a handler's exception into the acknowledgement to send, asking the task's
retry policy; the worker sends it.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import Any, Final

from ..models import Job
from ..retries import PermanentFailure
from ..tasks import AnyTask

__all__ = [
    "FINISH_LEVELS",
    "MAX_ERROR_CHARS",
    "Failure",
    "HandlerTimeout",
    "Rejected",
    "clip",
    "failure",
    "job_extra",
]

logger = logging.getLogger("pgq.worker")

MAX_ERROR_CHARS: Final = 8000
"""Error texts (message and traceback) longer than this are cut in the middle."""

FINISH_LEVELS: Final = {"succeeded": logging.DEBUG, "snoozed": logging.DEBUG, "retry": logging.WARNING,
                        "released": logging.WARNING, "unknown kind": logging.DEBUG, "cancelled": logging.INFO,
                        "lease lost": logging.WARNING}
"""Log level of a job's finish line by outcome (any other outcome: a failure, ERROR)."""


class HandlerTimeout(Exception):
    """An attempt ran past its task's timeout."""


class Rejected(Exception):
    """A job this worker cannot run at all (unknown kind, bad payload): failed without retries."""


@dataclass(frozen=True, slots=True)
class Failure:
    """The acknowledgement of a failed attempt: `error` is stored as the job's last_error,
    `retry_in` seconds until the retry (None: the database's default backoff), `final` fails the job
    for good; `summary` is the one-line form for the log."""

    error: str
    retry_in: float | None
    final: bool
    summary: str

    @property
    def outcome(self) -> str:
        """The log outcome: "failed" or "retry"."""
        return "failed" if self.final else "retry"


def failure(job: Job, task: AnyTask | None, exc: BaseException) -> Failure:
    """Decide what a failed attempt of `job` (run by `task`, None when unknown) that raised `exc`
    becomes: rejected jobs and PermanentFailure fail at once, the last attempt fails, otherwise the
    task's retry policy says when to retry (None from it: fail now; an error in it: the default)."""
    final = isinstance(exc, Rejected | PermanentFailure)
    if isinstance(exc, HandlerTimeout):
        summary = error = f"timeout: task {job.kind!r} ran longer than its timeout of {exc.args[0]:g} s"
    elif isinstance(exc, Rejected):
        summary = error = str(exc)
    else:
        summary = f"{type(exc).__name__}: {exc}"
        error = summary + "\n\n" + "".join(traceback.format_exception(exc))
    retry_in: float | None = None
    if not final and task is not None and job.attempts < job.max_attempts:
        try:
            answer = task.retry.retry_in(job.attempts, exc)
        except Exception:
            logger.exception("job %d %s: retry policy failed; using the default backoff", job.id, job.kind)
            answer = None
        else:
            if answer is None:
                final = True
            else:
                retry_in = max(float(answer), 0.0)
    final = final or job.attempts >= job.max_attempts
    return Failure(clip(error), retry_in, final, summary)


def job_extra(job: Job, event: str) -> dict[str, Any]:
    """The `extra` fields of a log line about `job`."""
    return {"event": event, "job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempts}


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, cut in the middle when longer than `limit` characters (saying how much was cut)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters cut) ...\n{text[-half:]}"
