"""`WorkerState`: what a running worker holds, shared by its parts, and the bookkeeping of its slots.

A worker's parts (the producer that claims, the runner that runs handlers, the acknowledger, the
heartbeat, the shutdown) each own their own logic; the jobs they pass between them live here: the
slots (jobs running), the prefetch buffer (claimed, not started), every job leased and not yet
acknowledged, the events that drive the producer and the shutdown, and the counters.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..context import JobContext
from ..models import Claim, Job
from .config import WorkerConfig
from .prefetch import Prefetch

if TYPE_CHECKING:
    from ..metrics import Metrics

__all__ = ["COUNTERS", "ProcessSpan", "ProcessTracer", "Running", "WorkerState"]

COUNTERS = ("claimed", "succeeded", "retried", "failed", "snoozed", "released", "lost", "cancelled")
"""The worker's counters (`Worker.stats`)."""


class ProcessSpan(Protocol):
    """The consumer span of one attempt (pgq.otel), current while its handler runs. `trace_context`:
    its W3C trace context (a JSON object's text), stored with the follow-up jobs the attempt
    enqueues."""

    @property
    def trace_context(self) -> str | None:
        """The span's trace context (a JSON object's text; None: it has none to propagate)."""

    def failed(self, error: BaseException) -> None:
        """The attempt failed with `error` (recorded on the span)."""

    def ended(self, outcome: str) -> None:
        """The attempt left its slot with `outcome` ("succeeded", "retry", "failed", ...)."""


class ProcessTracer(Protocol):
    """What an instrumented worker calls around each attempt (pgq.otel.instrument sets one)."""

    def process(self, job: Job, trace_context: str | None) -> AbstractContextManager[ProcessSpan]:
        """The consumer span of `job`'s attempt, child of the stored `trace_context` (None: a root
        span); current inside the `with`, ended on leaving it."""


@dataclass(slots=True, eq=False)
class Running:
    """A job in one of the worker's slots. `context` is what its handler sees (`current_job()`,
    `cancel_requested()`, `set_progress()`)."""

    claim: Claim
    claimed_at: float
    context: JobContext
    task: asyncio.Task[None] | None = None  # None: a sync handler run through Threads.call
    released: bool = False  # handed back to the queue at shutdown while it ran
    interrupted: str | None = None  # why the worker stopped it ("cancelled", "lease lost"): no outcome is sent
    started: float = 0.0  # monotonic, when its handler was started
    span: ProcessSpan | None = None  # its consumer span, when the App is instrumented (pgq.otel)


class WorkerState:
    """The state of one run of a worker (see the module docstring). Used from the loop's thread only.

    `start` is the runner's: it puts a claimed job into a free slot.
    """

    def __init__(self, config: WorkerConfig, metrics: Metrics, counts: dict[str, int],
                 start: Callable[[Claim, float], None]) -> None:
        self.config = config
        self.metrics = metrics
        self.counts = counts
        self.start = start
        self.stopping = asyncio.Event()  # shutdown began: claim nothing more
        self.aborting = asyncio.Event()  # skip the waiting: release running jobs at once
        self.stop_at = 0.0  # monotonic, when shutdown began
        self.wake = asyncio.Event()  # the producer may have something to do
        self.run_ended = asyncio.Event()  # a job's run ended while stopping (shutdown waits for these)
        self.ready = True  # jobs may be ready: the last claim was full, a NOTIFY came, or a timer fired
        self.ready_gen = 0  # bumped by every NOTIFY and timer: a claim that raced one keeps `ready`
        self.poll_at = 0.0  # monotonic time of the next fallback poll
        self.running: dict[int, Running] = {}
        self.inflight: dict[int, Claim] = {}  # claimed and not yet acknowledged (heartbeat these)
        self.held: collections.deque[tuple[Claim, float]] = collections.deque()  # prefetched, not started
        self.abandoned = 0  # sync handlers abandoned after a timeout, still holding their thread
        self.prefetch = Prefetch(config.concurrency, config.prefetch)
        self.traces: dict[int, str] = {}  # job id -> its stored trace context, read after the claim (pgq.otel)

    def count(self, event: str, job: Job) -> None:
        """Count `event` (one of COUNTERS) for `job`, in the stats and the metrics."""
        self.counts[event] += 1
        self.metrics.job_event(event, job.queue, job.kind)

    def begin_stop(self) -> None:
        """Start the graceful shutdown (idempotent)."""
        if not self.stopping.is_set():
            self.stop_at = time.monotonic()
            self.stopping.set()
            self.wake.set()

    def begin_abort(self) -> None:
        """Start the immediate shutdown (idempotent)."""
        self.begin_stop()
        self.aborting.set()

    def free_slots(self) -> int:
        """Jobs a claim may ask for: free slots plus free room in the prefetch buffer."""
        return self.config.concurrency + self.prefetch.size - len(self.running) - self.abandoned - len(self.held)

    def acks_hold_claims(self) -> bool:
        """Whether so many finished jobs await their acknowledgement that claims pause: a worker
        whose acknowledgements do not get through stops taking work it could not report, and a
        crash re-runs at most that many jobs that had in fact finished.

        The bound is at least twice the concurrency and `ack_batch`, and otherwise two prefetch
        buffers: the adaptive buffer holds about PREFETCH_HORIZON seconds of work, so this is about
        twice that. A fixed bound of 1,000 paused claims of fast jobs for 8-11 % of a drain: one
        acknowledgement statement of several hundred jobs in flight while the next thousand
        finished. A finished job keeps its payload until it is acknowledged, so for big payloads
        `ack_batch` counts only up to twice the jobs PREFETCH_MAX_BYTES allows the buffer."""
        cfg = self.config
        size = self.prefetch.size
        finished = len(self.inflight) - len(self.running) - len(self.held)  # claimed, not held or running
        return finished >= max(2 * cfg.concurrency, 2 * size, min(cfg.ack_batch, 2 * self.prefetch.most()))

    def slot_freed(self) -> None:
        """A slot (or room in the acknowledgement backlog) freed up: start held jobs, and let the
        producer claim more if jobs may be ready."""
        self.start_held()
        if self.ready:
            self.wake.set()

    def start_held(self) -> None:
        """Start prefetched jobs while slots are free (not once shutdown began: they are released)."""
        held, running, concurrency = self.held, self.running, self.config.concurrency
        while held and not self.stopping.is_set() and len(running) + self.abandoned < concurrency:
            claim, claimed_at = held.popleft()
            self.start(claim, claimed_at)

    def wake_at(self, delay: float) -> None:
        """Make the producer look again `delay` seconds from now (a retry or snooze comes due)."""
        at = time.monotonic() + max(delay, 0.0) + 0.005
        if at < self.poll_at:
            self.poll_at = at
            self.wake.set()  # a sleeping producer recomputes its timeout
