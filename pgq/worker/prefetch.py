"""`Prefetch`: how many jobs a worker holds beyond its free slots (the adaptive prefetch decision).

Pure bookkeeping, no I/O and no clock of its own: the worker tells it when claims land and how long
jobs took, with its monotonic clock, and reads `size`. Tests drive it with made-up times.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PREFETCH_FIRST_LOOK", "PREFETCH_HORIZON", "PREFETCH_MAX", "PREFETCH_MAX_BYTES", "Prefetch"]

PREFETCH_HORIZON: Final = 0.25
"""Adaptive prefetch holds about this many seconds of work (at the rate jobs start)."""
PREFETCH_MAX: Final = 2048
"""Adaptive prefetch never holds more jobs than this (or than `concurrency`, when larger)."""
PREFETCH_MAX_BYTES: Final = 32 * 1024 * 1024
"""Nor more jobs than make this many bytes of payload, at the moving mean of the payload sizes its
claims brought (or than `concurrency`, when larger): big payloads would otherwise fill the worker's
memory (2048 jobs of 1 MB, the largest payload accepted, are 2 GB before they are even parsed)."""
PREFETCH_FIRST_LOOK: Final = 4
"""Adaptive prefetch takes its first look at the rate once the slots have been refilled this many
times (counted from the first claim's jobs), or after 50 ms, whichever comes first; later looks come
every 50 ms at most."""


class Prefetch:
    """The prefetch buffer's size: fixed (`fixed` jobs), or adaptive (`fixed` None).

    `size`: jobs a claim may take beyond the free slots. `mean_run`: moving mean of a job's time in
    its slot (0: no job finished yet). `mean_bytes`: moving mean of a claimed job's payload bytes
    (0: none claimed yet).
    """

    __slots__ = ("_looked", "_since", "_started", "concurrency", "fixed", "mean_bytes", "mean_run", "size")

    def __init__(self, concurrency: int, fixed: int | None) -> None:
        self.concurrency = concurrency
        self.fixed = fixed
        self.size = concurrency if fixed is None else fixed
        self.mean_run = 0.0
        self.mean_bytes = 0.0
        self._since = 0.0  # jobs started since then are the current window (0: no job started yet)
        self._started = 0  # jobs started before the current window
        self._looked = False  # the first look at the rate was taken

    def job_ran(self, seconds: float) -> None:
        """A job left its slot after `seconds` there."""
        self.mean_run = seconds if self.mean_run == 0 else self.mean_run + (seconds - self.mean_run) / 8

    def claim_landed(self, jobs: int, payload_bytes: float) -> None:
        """A claim brought `jobs` (> 0) jobs of `payload_bytes` decoded payload in all."""
        size = payload_bytes / jobs
        self.mean_bytes = size if self.mean_bytes == 0 else self.mean_bytes + 0.25 * (size - self.mean_bytes)

    def most(self) -> int:
        """The most jobs the adaptive buffer may hold: PREFETCH_MAX, and no more than PREFETCH_MAX_BYTES
        of payload at the moving mean of the sizes claims brought; never less than the concurrency."""
        mean = self.mean_bytes
        most = PREFETCH_MAX if mean <= 0 else min(PREFETCH_MAX, int(PREFETCH_MAX_BYTES / mean))
        return max(self.concurrency, most)

    def adapt(self, now: float, started: int) -> None:
        """Adaptive prefetch (`fixed` None), after a claim landed at `now` with `started` jobs started
        in all so far: hold about PREFETCH_HORIZON seconds of work, judged by the rate jobs started at
        since the last look (the first once the slots have been refilled PREFETCH_FIRST_LOOK times,
        later ones every 50 ms; at most `concurrency` divided by the moving mean of a job's time in
        its slot; no growth before a job has left its slot), never less than `concurrency` nor more
        than `max(concurrency, PREFETCH_MAX)`, and no more jobs than PREFETCH_MAX_BYTES of payload at
        the mean size claims brought (applied at every claim, not only at a look: a switch to big
        payloads shrinks the buffer at once). Fast jobs get big claims (few round trips per job); slow
        jobs keep the buffer small, so that other workers are not starved of a shallow queue; big
        payloads keep it small enough for the worker's memory."""
        if self.fixed is not None:
            return
        most = self.most()
        self.size = min(self.size, most)
        if self._since == 0.0:
            # The first window opens once the first claim has filled the slots: the time to start up
            # and connect is not part of the rate, nor are these starts (they fill empty slots).
            if started:
                self._since, self._started = now, started
            return
        elapsed = now - self._since
        if elapsed < 0.05 and (self._looked or started - self._started < PREFETCH_FIRST_LOOK * self.concurrency):
            # A look every 50 ms at most, or the rate of a short window is noise. The first look
            # comes sooner, once the slots have been refilled a few times: until then a fast drain
            # claims `concurrency` jobs per round trip, at a third of its rate once the buffer grew.
            return
        if self.mean_run == 0:
            # No job has left its slot yet: the starts so far only filled empty slots, which says
            # nothing of the rate slots free up at (a worker with 2 slots and 0.2 s jobs saw "33 jobs
            # a second" 60 ms after starting and held 8). Stay at the floor until one has; fast jobs
            # finish long before the first look is due.
            return
        rate = (started - self._started) / elapsed
        self._since, self._started, self._looked = now, started, True
        # No more jobs can start per second than slots free up: concurrency / time in a slot. For
        # slow jobs (that bound keeps the buffer under twice the concurrency) it caps the rate: a
        # short window that caught a burst of starts, slots freed together, would otherwise pass for
        # the rate and over-fetch a shallow queue. For fast jobs both figures are large and the
        # bound, a noisier estimate of the same rate, would only shrink the claims.
        bound = self.concurrency / self.mean_run
        if bound * PREFETCH_HORIZON < 2 * self.concurrency:
            rate = min(rate, bound)
        self.size = max(self.concurrency, min(int(rate * PREFETCH_HORIZON), most))

    @property
    def window_open(self) -> bool:
        """Whether the first rate window has opened (a claim filled the slots)."""
        return self._since != 0.0
