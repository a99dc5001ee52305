"""What happens after an attempt fails or must wait: retry policies (`Backoff`), `PermanentFailure`,
`Snooze`, and polling (`poll_later`, `polling_schedule`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol

from ._jitter import JITTER
from .context import _context
from .errors import InvalidJob
from .models import delay_seconds

__all__ = ["DEFAULT_RETRY", "Backoff", "PermanentFailure", "PollingTimeout", "RetryPolicy", "Snooze",
           "poll_later", "polling_schedule"]


class RetryPolicy(Protocol):
    """Decides when a failed attempt is tried again.

    `retry_in(attempt, error)` gets the number of the attempt that just failed (1 for the first) and
    the exception it raised; it returns the delay in seconds before the next attempt, or None to fail
    the job now. The job's `max_attempts` still applies: the last attempt fails the job whatever the
    policy answers. Called on the worker's event loop: it must be quick and must not block.
    """

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        """Seconds until the next attempt, or None for no retry."""
        ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: `initial * factor ** (attempt - 1)` seconds times a random
    factor in [1 - jitter, 1 + jitter), never over `max_delay` and never under `min_delay`.

    `Backoff()` (the default policy) waits about 2, 4, 8 ... seconds (at most an hour, never under 1 s).
    `Backoff(initial=5, factor=1, jitter=0)` is a fixed 5 s delay. Raises InvalidJob for negative or
    inconsistent values.
    """

    initial: float = 2.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.25
    min_delay: float = 1.0

    def __post_init__(self) -> None:
        for name in ("initial", "factor", "max_delay", "jitter", "min_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidJob(f"Backoff.{name} must be a number >= 0, got {value!r}")
        if self.factor < 1:
            raise InvalidJob(f"Backoff.factor must be >= 1, got {self.factor!r}")
        if self.jitter >= 1:
            raise InvalidJob(f"Backoff.jitter must be below 1, got {self.jitter!r}")
        if self.min_delay > self.max_delay:
            raise InvalidJob("Backoff.min_delay must not exceed max_delay")

    def retry_in(self, attempt: int, error: BaseException) -> float:
        """See `RetryPolicy.retry_in`; this policy always retries."""
        exponent = min(max(attempt - 1, 0), 64)  # 2 ** 64 is already far past any max_delay
        delay = min(self.initial * self.factor**exponent, self.max_delay)
        if self.jitter:
            delay = min(delay * (1 - self.jitter + JITTER.random() * 2 * self.jitter), self.max_delay)
        return max(delay, self.min_delay)


DEFAULT_RETRY = Backoff()
"""The retry policy of tasks that name none: about 2, 4, 8 ... s, capped at an hour, never under 1 s."""


class PermanentFailure(Exception):
    """Raise from a handler to fail the job now, without retries (its message becomes the error)."""


class PollingTimeout(PermanentFailure):
    """Raised by `poll_later` when a polling job is past its deadline: the job fails as timed out."""


class Snooze(Exception):
    """Return or raise from a handler to requeue the job `delay` from now (a timedelta or seconds,
    >= 0) without spending an attempt. Raises InvalidJob for a negative or non-numeric delay."""

    def __init__(self, delay: dt.timedelta | float) -> None:
        seconds = delay_seconds(delay)
        if not seconds >= 0:
            raise InvalidJob(f"snooze delay must be >= 0, got {delay!r}")
        super().__init__(f"snooze for {seconds:g} s")
        self.delay = seconds




def polling_schedule(
    elapsed: dt.timedelta | float,
    *,
    deadline: dt.timedelta | float,
    fast: float = 10.0,
    fast_for: float = 120.0,
    slow: float = 60.0,
) -> float | None:
    """Seconds until the next poll of a job that waits for something, or None once it is too late.

    `elapsed`: how long the job has been waiting (see `poll_later`). Every `fast` seconds during the
    first `fast_for` seconds, then every `slow` seconds; never past the deadline, so the last poll
    happens at the deadline. None when `elapsed` has reached `deadline`. Pure: no I/O, no clock.
    """
    waited = delay_seconds(elapsed)
    limit = delay_seconds(deadline)
    if not (fast > 0 and slow > 0 and fast_for >= 0):
        raise InvalidJob("polling intervals must be > 0 (and fast_for >= 0)")
    if waited >= limit:
        return None
    step = fast if waited < fast_for else slow
    return min(step, limit - waited)


def poll_later(
    deadline: dt.timedelta | float,
    *,
    fast: float = 10.0,
    fast_for: float = 120.0,
    slow: float = 60.0,
) -> Snooze:
    """Return the Snooze that polls again on the `polling_schedule`, for the current job.

    The waiting time is measured on the database clock from the job's `created_at` (snoozes do not
    reset it). Past the deadline, raises PollingTimeout ("timed out ..."), which fails the job
    without retries. Call it from a handler only (PgqError otherwise).
    """
    context = _context()
    job = context.claim.job
    waited = (context.db_now() - job.created_at).total_seconds()
    delay = polling_schedule(waited, deadline=deadline, fast=fast, fast_for=fast_for, slow=slow)
    if delay is None:
        raise PollingTimeout(
            f"timed out: job {job.id} ({job.kind}) still waiting after {waited:.0f} s, "
            f"past its deadline of {delay_seconds(deadline):g} s"
        )
    return Snooze(delay)
