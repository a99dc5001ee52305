"""`Producer`: decides when a worker claims, claims, and hands the claimed jobs to its slots.

It claims up to the number of free slots (plus the prefetch buffer) in one claim whenever jobs may
be ready: after a NOTIFY for one of its queues, when its poll timer fires (every `poll_interval`,
jittered, or sooner when the database says a scheduled job is due sooner), or when a slot frees up
while the last claim came back full. A second claim may overlap a claim in flight
(`claims_in_flight`), for the slots that freed up meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

import psycopg
import tenacity

from .. import _ops
from .._jitter import JITTER
from ..client import AsyncQueue
from ..errors import NotMigrated, PgqError, one_line
from ..models import Claim
from ..tasks import AnyTask
from .acks import Acknowledger
from .state import WorkerState

__all__ = ["HANDLER_HEAD_START", "Producer", "db_trouble"]

logger = logging.getLogger("pgq.worker")

HANDLER_HEAD_START: Final = 0.001
"""After a claim that emptied the queue, the jobs it started run this long (seconds) before the
worker asks when the next scheduled job is due."""


def db_trouble(what: str, failures: int, exc: BaseException | None) -> float:
    """Log a database problem during `what` (quietly after the first few failures in a row); return
    the seconds to back off: 0.1 s doubling up to 5 s, jittered down by up to half."""
    delay: float = min(0.1 * 2.0 ** min(failures, 10), 5.0) * JITTER.uniform(0.5, 1.0)
    if exc is not None:
        level = logging.WARNING if failures <= 3 or failures % 20 == 0 else logging.DEBUG
        logger.log(level, "database unavailable during %s (%s); retrying in %.2f s", what, one_line(exc), delay,
                   extra={"event": "db_unavailable", "step": what, "failures": failures})
    return delay


class Producer:
    """The claiming side of one run of a worker. `run()` as a task; `on_notify` and `on_listen` are
    the LISTEN connection's callbacks. `fatal` is called with the error that makes claiming
    pointless (schema missing, no right to claim). `traced`: the App is instrumented (pgq.otel), so
    each claim also reads its jobs' stored trace contexts."""

    def __init__(self, state: WorkerState, queue: AsyncQueue, acks: Acknowledger, tasks: Mapping[str, AnyTask],
                 fatal: Callable[[BaseException], None], *, traced: bool = False) -> None:
        cfg = state.config
        self._traced = traced  # pgq.otel: read the trace contexts of claimed jobs
        self._state = state
        self._queue = queue
        self._acks = acks
        self._tasks = tasks
        # The claim asks for the app's kinds only (issue #42): jobs of kinds it has no task for stay
        # queued and untouched for a worker that knows them, instead of being claimed and handed back.
        # (The worker's tasks are a copy of the app's, taken at start.)
        self._kinds = sorted(tasks)
        self._fatal = fatal
        self._queues = list(cfg.queues) if cfg.queues is not None else None
        self._queue_set = frozenset(cfg.queues) if cfg.queues is not None else None
        self._claiming = 0  # slots reserved by claims in flight
        self._claims = 0  # claims in flight (counted by the claims themselves, not by task callbacks)
        self._claim_tasks: set[asyncio.Task[None]] = set()
        self._producing = False  # set up and claiming (the producer runs)
        self._failures = 0  # failed claims in a row
        self._pause_until = 0.0  # backoff after a failed claim
        self._unclaimable = 0  # claims in a row that found due jobs but could take none of them

    def on_notify(self, payload: str) -> None:
        """A NOTIFY on channel pgq: `payload` names a queue that got jobs ("*": any queue)."""
        if self._queue_set is None or payload == "*" or payload in self._queue_set:
            state = self._state
            state.ready = True
            state.ready_gen += 1
            if self._producing and not self._claims:
                self.claim_if_due(time.monotonic())
            state.wake.set()

    def on_listen(self) -> None:
        """The LISTEN connection is (re)connected: notifications sent meanwhile are lost, so look now."""
        state = self._state
        state.ready = True
        state.ready_gen += 1
        state.wake.set()

    async def run(self) -> None:
        """Set up, then claim whenever due until shutdown begins; waits for claims in flight."""
        state = self._state
        poll_interval = state.config.poll_interval
        await self._setup()
        self._producing = True
        try:
            while not state.stopping.is_set():
                now = time.monotonic()
                if now >= state.poll_at:
                    state.ready = True
                    state.ready_gen += 1
                    # Fire once: the claim this starts sets an earlier time if it has reason to.
                    state.poll_at = now + poll_interval * JITTER.uniform(0.8, 1.2)
                if self.claim_if_due(now):
                    continue
                # Nothing to do now. When jobs may be ready (so only slots, claims in flight or the
                # ack backlog are in the way) a freed slot, a finished claim or a flushed backlog
                # wakes us; the poll interval bounds the wait all the same.
                state.wake.clear()
                timeout = poll_interval if state.ready else state.poll_at - now
                if now < self._pause_until:
                    timeout = self._pause_until - now
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await state.wake.wait()
        finally:
            self._producing = False
            if self._claim_tasks:  # let them land: when stopping, their jobs are handed straight back
                await asyncio.gather(*self._claim_tasks, return_exceptions=True)

    def claim_if_due(self, now: float) -> bool:
        """Start a claim if one is due now; say whether it did. The producer's one decision, also
        taken straight from a NOTIFY when the worker is idle (which spares the wake-up latency a
        detour through the producer task)."""
        state = self._state
        cfg = state.config
        if not state.ready or state.stopping.is_set() or not self._kinds:
            return False
        free = state.free_slots() - self._claiming
        # Claim at once when a slot would otherwise sit idle; else once a quarter of the prefetch
        # buffer is gone, so that claims stay big (one round trip for many jobs) instead of
        # degenerating into one per finished job, while the three quarters left keep the handlers
        # busy for longer than the claim takes (a claim costs the database about as much per job as
        # a no-op job costs the worker: at half, the buffer often ran dry before the claim was
        # back). A claim in flight already asks for every slot free when it started; another may
        # overlap it (claims are bound by round trips, not by the database), but only for a
        # worthwhile batch.
        idle = cfg.concurrency - len(state.running) - state.abandoned - len(state.held) - self._claiming
        batch = max(1, state.prefetch.size // 4)
        wanted = (1 if idle > 0 else batch) if not self._claims else max(batch, cfg.concurrency // 4)
        if (free >= wanted and self._claims < cfg.claims_in_flight and now >= self._pause_until
                and not state.acks_hold_claims()):
            self._claiming += free
            self._claims += 1
            task = asyncio.get_running_loop().create_task(self._claim(free))
            self._claim_tasks.add(task)
            task.add_done_callback(self._claim_tasks.discard)
            return True
        return False

    async def _claim(self, limit: int) -> None:
        """One claim of up to `limit` jobs (the slots reserved for it); starts the jobs it gets."""
        state = self._state
        cfg = state.config
        generation = state.ready_gen
        decoded = _ops.jsonb_bytes_decoded()
        try:
            claims = await self._queue._run(_ops.claim(
                worker=cfg.claimed_by, queues=self._queues, kinds=self._kinds, limit=limit, lease=cfg.lease))
        except NotMigrated as exc:
            self._fatal(exc)
            return
        except psycopg.errors.InsufficientPrivilege as exc:
            # Without the right to claim, a worker can do nothing at all: stop with the reason.
            self._fatal(PgqError(f"this worker's role may not claim jobs ({one_line(exc)}); "
                                 "grant it pgq_worker (see `pgq roles`)"))
            return
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            self._failures += 1
            self._pause_until = time.monotonic() + db_trouble("claim", self._failures, exc)
            return
        except Exception:
            self._failures += 1
            logger.exception("claim failed", extra={"event": "job_claim_error"})
            self._pause_until = time.monotonic() + db_trouble("claim", self._failures, None)
            return
        finally:
            self._claiming -= limit
            self._claims -= 1
            state.wake.set()
        if self._failures:
            logger.info("database reachable again: claiming", extra={"event": "db_reconnected"})
            self._failures = 0
        if claims:
            self._unclaimable = 0
            # Payload bytes of this claim (more if other decoding happened meanwhile: a claim
            # overlapping it, a handler reading jobs; the buffer then only gets smaller).
            state.prefetch.claim_landed(len(claims), _ops.jsonb_bytes_decoded() - decoded)
        if state.stopping.is_set():  # claimed while shutting down: hand them straight back
            return self._hand_back(claims)
        if self._traced and claims:
            await self._read_traces(claims)
        now = time.monotonic()
        inflight, held = state.inflight, state.held
        for claim in claims:
            inflight[claim.job.id] = claim  # leased from now on: heartbeated, released at shutdown
            held.append((claim, now))
        state.start_held()
        state.prefetch.adapt(now, state.counts["claimed"])
        if len(claims) < limit and generation == state.ready_gen:
            # Nothing more is ready (unless a NOTIFY or a timer came meanwhile: the generation says).
            await self._sleep_until_due(now, found_any=bool(claims))

    async def _read_traces(self, claims: list[Claim]) -> None:
        """Read the stored trace contexts of `claims` (an instrumented worker: pgq.otel) for their
        consumer spans. Tracing never holds a job up: on an error the jobs run with root spans."""
        try:
            found = await self._queue._run(_ops.trace_context_get([c.id for c in claims]))
            self._state.traces.update(found)
        except Exception as exc:
            logger.warning("could not read the trace contexts of %d claimed jobs (%s); their spans start new "
                           "traces", len(claims), one_line(exc), extra={"event": "trace_context_error"})

    def _hand_back(self, claims: list[Claim]) -> None:
        for claim in claims:
            self._state.inflight[claim.id] = claim
            self._acks.snooze(claim, 0.0)

    async def _sleep_until_due(self, now: float, *, found_any: bool) -> None:
        # Sleep until the next poll, or until the earliest scheduled job when that is sooner.
        state = self._state
        state.ready = False
        # Let the handlers just started begin before this lookup (it only sets the next poll time):
        # a sync handler's thread needs the GIL, which this loop holds until it next waits, and
        # the lookup would keep it busy for a quarter of a millisecond on the critical path.
        await asyncio.sleep(HANDLER_HEAD_START)
        try:
            delay = await self._queue._run(_ops.next_run_at(self._queues))
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled):
            delay = None
        poll = state.config.poll_interval * JITTER.uniform(0.8, 1.2)
        if delay is not None and delay <= 0 and not found_any:
            # Jobs are due, yet this claim got none: they are locked by other claims in flight, or
            # of kinds at their concurrency limit. Back off (50 ms, doubling up to the poll
            # interval) instead of asking again every few milliseconds until that changes.
            delay = 0.05 * 2.0 ** min(self._unclaimable, 10)
            self._unclaimable += 1
        at = time.monotonic() + (poll if delay is None else min(poll, max(delay, 0.0) + 0.005))
        if at < state.poll_at or state.poll_at <= now:
            state.poll_at = at
        state.wake.set()

    async def _setup(self) -> None:
        """Set the concurrency, rate and group limits of the app's tasks before the first claim, retrying (through
        tenacity) while the database is unreachable; shutdown ends the retrying."""
        limits = [(t.name, t.concurrency_limit) for t in self._tasks.values() if t.concurrency_limit is not None]
        rates = [(t.name, t.rate_limit) for t in self._tasks.values() if t.rate_limit is not None]
        groups = [(t.name, t.group_concurrency, t.group_rate_limit) for t in self._tasks.values()
                  if t.group_concurrency is not None or t.group_rate_limit is not None]
        if not self._kinds:
            # An app without tasks claims nothing (issue #42: a worker claims only kinds it knows);
            # one cheap read still tells a missing schema at start, as the first claim would.
            try:
                await self._queue._run(_ops.next_run_at(self._queues))
            except NotMigrated as exc:
                self._fatal(exc)
            except psycopg.Error:
                pass  # the database's troubles are the maintenance's and listener's to report
            return
        if not limits and not rates and not groups:
            return
        failures = 0

        async def pause(seconds: float) -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._state.stopping.wait()

        def wait(retry: tenacity.RetryCallState) -> float:
            nonlocal failures
            failures += 1
            exc = retry.outcome.exception() if retry.outcome is not None else None
            return db_trouble("setup", failures, exc)

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(psycopg.OperationalError),
            wait=wait, sleep=pause, reraise=True,
            stop=lambda _: self._state.stopping.is_set(),
        )
        with contextlib.suppress(psycopg.OperationalError):  # only once shutdown began
            async for attempt in retrying:
                with attempt:
                    for kind, limit in limits:
                        await self._set_limit(kind, limit)
                    for kind, rate in rates:
                        await self._set_rate(kind, rate)
                    for kind, concurrency, group_rate in groups:
                        await self._set_group_limits(kind, concurrency, group_rate)

    async def _set_limit(self, kind: str, limit: int) -> None:
        try:
            await self._queue.set_concurrency_limit(kind, limit)
        except psycopg.errors.InsufficientPrivilege as exc:
            # A role without the right (granted to pgq_worker) still runs jobs: the limit the database
            # holds, if any, is the one claims obey.
            logger.warning("cannot set the concurrency limit of task %s to %d: %s; claims obey the limit "
                           "stored in the database, if any", kind, limit, one_line(exc),
                           extra={"event": "concurrency_limit_refused", "kind": kind})

    async def _set_group_limits(self, kind: str, concurrency: int | None, rate: tuple[int, float] | None) -> None:
        try:
            await self._queue.set_group_limits(kind, concurrency=concurrency, rate=rate)
        except psycopg.errors.InsufficientPrivilege as exc:
            logger.warning("cannot set the group limits of task %s: %s; claims obey the limits stored in the "
                           "database, if any", kind, one_line(exc),
                           extra={"event": "group_limits_refused", "kind": kind})

    async def _set_rate(self, kind: str, rate: tuple[int, float]) -> None:
        try:
            await self._queue.set_rate_limit(kind, rate)
        except psycopg.errors.InsufficientPrivilege as exc:
            logger.warning("cannot set the rate limit of task %s to %d per %g s: %s; claims obey the limit "
                           "stored in the database, if any", kind, rate[0], rate[1], one_line(exc),
                           extra={"event": "rate_limit_refused", "kind": kind})
