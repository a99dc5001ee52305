"""What a handler knows about the job it runs, and tells its worker back.

`current_job()` returns the job the calling handler runs; `cancel_requested()` says whether it must
stop (cancelled, or its lease lost); `set_progress(value)` reports how far it got. The worker keeps a
`JobContext` per attempt and makes it current for the handler (a context variable, which a sync
handler's thread inherits).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import time
from collections.abc import Mapping

from .errors import PgqError
from .models import JSON, Claim, Job, JobSpec, encode_json

__all__ = ["JobContext", "cancel_requested", "current_job", "set_progress"]


class JobContext:
    """What a worker knows about the attempt it runs, and what the handler tells it back.

    `claim` and `claimed_at` (monotonic, when the claim came back) are fixed. `cancelled` is set by
    the worker when the attempt must stop (the job was cancelled, or its lease was lost);
    `progress` holds the latest progress the handler reported as (version, JSON text), None until it
    reports any, and `progress_sent` the version the database has; the worker's heartbeat sends the
    newer one, except the attempt's first, which the worker sends within a second
    (`progress_hurried` once it did). A handler reads them through `cancel_requested()` and writes
    through `set_progress()`.
    `follow_ups` holds the jobs `pgq.after_success` recorded (None: none), which the worker inserts in
    the transaction that completes the attempt; `tasks` are the worker's tasks by name, through
    which a follow-up named by its kind takes that task's defaults.
    """

    __slots__ = ("cancelled", "claim", "claimed_at", "follow_ups", "progress", "progress_hurried", "progress_sent",
                 "tasks")

    def __init__(self, claim: Claim, claimed_at: float, tasks: Mapping[str, object] | None = None) -> None:
        self.claim = claim
        self.claimed_at = claimed_at
        self.cancelled = False
        self.progress: tuple[int, str] | None = None
        self.progress_sent = 0
        self.progress_hurried = False  # the worker sent this attempt's first progress ahead of the heartbeat
        self.follow_ups: list[JobSpec] | None = None
        self.tasks: Mapping[str, object] = {} if tasks is None else tasks

    def db_now(self) -> dt.datetime:
        """The database clock now, estimated without a round trip: the claim's `started_at` (set by
        the database) plus the time elapsed on this machine's monotonic clock since the claim."""
        started = self.claim.job.started_at
        assert started is not None, "a claimed job always has started_at"
        return started + dt.timedelta(seconds=time.monotonic() - self.claimed_at)

    def unsent_progress(self) -> str | None:
        """The progress (JSON text) reported since the last `mark_sent`, or None; call it from the
        worker's loop. Returns the text and remembers its version as the one being sent."""
        progress = self.progress  # one read: a handler's thread may replace it meanwhile
        if progress is None or progress[0] == self.progress_sent:
            return None
        self.progress_sent = progress[0]
        return progress[1]


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("pgq_current_job", default=None)


def current_job() -> Job:
    """The job the calling handler runs (as claimed: id, kind, payload, attempts, lease_token ...).

    Works in async handlers and in sync handlers (their thread gets the handler's context). Raises
    PgqError when called outside a handler run by a pgq worker.
    """
    return _context().claim.job


def cancel_requested() -> bool:
    """Whether the job the calling handler runs must stop: it was cancelled, or its worker lost its
    lease (another worker may run it now). False outside a handler.

    The cooperative contract of a plain `def` handler: a thread cannot be interrupted, so a long
    handler calls this between steps and returns (or raises) soon after it turns True; whatever it
    returns then is dropped (the job stays cancelled, or belongs to whoever holds the lease now),
    and its worker slot is free again once it returns. An `async def` handler needs nothing: it gets
    `asyncio.CancelledError` at its next `await` (it may catch it to clean up, then re-raise).
    """
    context = _current.get()
    return context is not None and context.cancelled


def set_progress(value: JSON) -> None:
    """Report how far the calling handler got: any JSON value (e.g. ``{"done": 40, "of": 100}``).

    Cheap: nothing is written now. The attempt's first progress is stored within about a second (so
    that a job shows it has started reporting); after that the worker stores the latest value with
    its next heartbeat (every third of the lease) or with the attempt's outcome, whichever comes
    first. It is visible as
    `Job.progress`, in `pgq jobs show` and in the pgq.running_jobs view, and is kept across attempts,
    so a retried handler can read where the last attempt got to (`current_job().progress`, as claimed).
    Raises InvalidJob for a value that is not JSON or is larger than a payload may be, PgqError
    outside a handler.
    """
    context = _context()
    text = encode_json("progress", value, None)
    previous = context.progress
    context.progress = (1 if previous is None else previous[0] + 1, text)


def _context() -> JobContext:
    context = _current.get()
    if context is None:
        raise PgqError("no pgq job is running here (current_job() works inside task handlers only)")
    return context
