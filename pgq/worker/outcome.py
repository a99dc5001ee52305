"""What an attempt's end means: the failure policy (retry when, or fail for good) and log fields.

No I/O: `failure` turns a handler's exception into the acknowledgement to send, asking the task's
retry policy; the worker sends it.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from ..bounds import MAX_DELAY_S
from ..errors import InvalidJob
from ..models import Claim, Job, JobSpec, encode_json
from ..retries import PermanentFailure, Snooze
from ..tasks import AnyTask, follow_up_spec

__all__ = [
    "FINISH_LEVELS",
    "MAX_ERROR_CHARS",
    "QUIET_EVENTS",
    "Failure",
    "FinishSink",
    "HandlerTimeout",
    "Rejected",
    "Verdict",
    "clip",
    "failure",
    "finish_sink",
    "job_extra",
    "set_finish_sink",
    "verdict",
]

logger = logging.getLogger("pgq.worker")

QUIET_EVENTS: Final = frozenset({"job_start", "job_finish"})
"""The `event` of the per-job log records that `--quiet` leaves out below WARNING."""

MAX_ERROR_CHARS: Final = 8000
"""Error texts (message and traceback) longer than this are cut in the middle."""

FINISH_LEVELS: Final = {"succeeded": logging.INFO, "snoozed": logging.INFO, "retry": logging.WARNING,
                        "released": logging.INFO, "unknown kind": logging.DEBUG, "cancelled": logging.INFO,
                        "lease lost": logging.WARNING}
"""Log level of a job's finish line by outcome (any other outcome: a failure, ERROR): one INFO line
per finished job as peers log, a job handed back at shutdown (a drain's documented end) included;
`QUIET_EVENTS` lets `pgq worker --quiet` drop the INFO ones."""


FinishSink = Callable[[int, Job, str, float], bool]
"""Writes the finish line of a job that ended without an error (level, job, outcome, seconds) itself
and returns True, or returns False to leave it to the logging module."""

_finish_sink: FinishSink | None = None


def set_finish_sink(sink: FinishSink | None) -> None:
    """Install `sink` (None: none) for the worker's per-job finish lines. `pgq worker` installs one
    that writes the line as its text log handler would, without a LogRecord, while that handler is
    the only one: at a line per job, the logging module's machinery was most of a no-op job's cost."""
    global _finish_sink
    _finish_sink = sink


def finish_sink() -> FinishSink | None:
    """The sink `set_finish_sink` installed, or None."""
    return _finish_sink


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
                # Within 0 .. 100 years (pgq.bounds); NaN: the database's default backoff.
                seconds = float(answer)
                retry_in = None if seconds != seconds else min(max(seconds, 0.0), MAX_DELAY_S)
    final = final or job.attempts >= job.max_attempts
    return Failure(clip(error), retry_in, final, summary)


class Verdict(NamedTuple):
    """The acknowledgement an ended attempt calls for: `outcome` "succeeded" (complete with `result`
    and `follow_ups`), "snoozed" (snooze for `delay` seconds), or that of `failure` ("retry" or
    "failed": fail, enqueueing `follow_ups` when it fails for good). A NamedTuple: one is built per
    attempt, and a frozen dataclass costs several times as much to build."""

    outcome: str
    result: Any = None
    follow_ups: list[JobSpec] | None = None
    delay: float = 0.0
    failure: Failure | None = None


_SUCCEEDED: Final = Verdict("succeeded")
"""The verdict of most attempts (no result, no follow-ups), built once: a NamedTuple cannot change, so
one serves every such attempt (building it, with a keyword, was 0.4 us of each no-op job's cost)."""


def verdict(claim: Claim, task: AnyTask | None, value: Any, failed: BaseException | None,
            follow_ups: list[JobSpec] | None, tasks: Mapping[str, object]) -> Verdict:
    """Decide how to acknowledge the attempt `claim` of a job run by `task` that returned `value` or
    raised `failed`, `follow_ups` being the jobs its handler asked for (`pgq.after_success`) and
    `tasks` the tasks by name that follow-ups named by kind take their defaults from. No I/O: the
    worker's runner and `pgq.testing.drain` send what it says. A result that cannot be stored, or a
    task's `on_success` job that cannot be built, turns a success into a rejection."""
    if failed is None and value is None and (task is None or task.on_success is None):
        # The most common end of a job: nothing to check.
        return _SUCCEEDED if follow_ups is None else Verdict("succeeded", follow_ups=follow_ups)
    if failed is None and isinstance(value, Snooze):
        failed = value
    if failed is None and value is not None:
        try:
            encode_json("result", value, None)
        except InvalidJob as exc:
            assert task is not None
            failed = Rejected(f"task {task.name!r} returned a value that cannot be stored as its result: {exc}")
    if failed is None and task is not None and task.on_success is not None:
        try:
            follow_ups = [*(follow_ups or ()), follow_up_spec(
                task.on_success, {"job_id": claim.id, "result": value}, {}, tasks)]
        except InvalidJob as exc:
            failed = Rejected(f"task {task.name!r}: its on_success job cannot be enqueued: {exc}")
    if failed is None:
        return Verdict("succeeded", result=value, follow_ups=follow_ups)
    if isinstance(failed, Snooze):
        return Verdict("snoozed", delay=failed.delay)
    if isinstance(failed, asyncio.CancelledError):  # from the handler, not a cancellation of the worker's
        failed = RuntimeError("the handler raised CancelledError")
    ack = failure(claim.job, task, failed)
    on_failure = None
    if ack.final and task is not None and task.on_failure is not None:
        error = clip(ack.summary, 2000).replace("\x00", "\\0")
        on_failure = [follow_up_spec(task.on_failure, {"job_id": claim.id, "error": error}, {}, tasks)]
    return Verdict(ack.outcome, follow_ups=on_failure, failure=ack)


def job_extra(job: Job, event: str) -> dict[str, Any]:
    """The `extra` fields of a log line about `job`."""
    return {"event": event, "job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempts}


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, cut in the middle when longer than `limit` characters (saying how much was cut)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters cut) ...\n{text[-half:]}"
