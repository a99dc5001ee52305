"""`Acknowledger`: sends finished jobs' outcomes to the database in batches, fenced by lease token.

Outcomes (complete / fail / snooze) are queued by the runner and sent by one flush loop: at most one
statement per kind of outcome per flush, `ack_delay` after the oldest pending one or as soon as
`ack_batch` are pending. A flush that a connection error cut off is sent again after a pause (every
acknowledgement is fenced, so resending is safe); a lease found lost is logged, never raised.

An acknowledgement waits at most ACK_LOCK_TIMEOUT (pgq._ops.jobs: 50 ms) for a row lock another
transaction holds (a producer's open transaction after an enqueue naming a running job in
`depends_on`, in a watermark enqueue or in Queue.wait): then the batch is sent again through the
statement that skips such a row and reports it busy, so the rest of the batch goes through. A busy
outcome is neither lost nor an error: it is put back and sent again after a pause of its own,
BUSY_FIRST_PAUSE doubling up to BUSY_MAX_PAUSE, until the row is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from .. import _ops
from .._jitter import JITTER
from ..client import AsyncQueue
from ..errors import one_line
from ..models import JSON, Claim, JobSpec, JobStatus
from .outcome import job_extra
from .state import WorkerState

__all__ = ["BUSY_FIRST_PAUSE", "BUSY_MAX_PAUSE", "Acknowledger", "Acks"]

logger = logging.getLogger("pgq.worker")

BUSY_FIRST_PAUSE = 0.01
"""Seconds before an outcome whose row was busy (locked by another transaction) is sent again; the
pause doubles with each busy answer for that job, up to BUSY_MAX_PAUSE."""
BUSY_MAX_PAUSE = 1.0

AckT = TypeVar("AckT")


@dataclass(slots=True)
class Acks:
    """Outcomes waiting to be sent: completions (claim, result), failures (claim, error, retry_in,
    final) and snoozes or releases (claim, delay), with the progress their handlers reported last
    and no heartbeat stored yet, and the follow-up jobs to enqueue with their success (or final
    failure)."""

    completes: list[tuple[Claim, JSON]] = field(default_factory=list)
    fails: list[tuple[Claim, str, float | None, bool]] = field(default_factory=list)
    snoozes: list[tuple[Claim, float]] = field(default_factory=list)
    progress: dict[int, str] = field(default_factory=dict)  # job id -> progress not yet stored (JSON)
    follow_ups: dict[int, list[JobSpec]] = field(default_factory=dict)  # job id -> jobs to enqueue with it

    def __len__(self) -> int:
        return len(self.completes) + len(self.fails) + len(self.snoozes)

    def claims(self) -> Iterable[Claim]:
        """Every claim in the batch."""
        yield from (c for c, _ in self.completes)
        yield from (c for c, _, _, _ in self.fails)
        yield from (c for c, _ in self.snoozes)


class Acknowledger:
    """Batches and sends acknowledgements for one run of a worker (see the module docstring).

    `acking`: ids in a flush being sent right now (the heartbeat leaves them alone). `idle` is set
    while nothing is pending and nothing is being sent. Run `run()` as a task; `flush_all()` at
    shutdown makes it send what is pending at once.
    """

    def __init__(self, state: WorkerState, queue: AsyncQueue) -> None:
        self._state = state
        self._queue = queue
        self._delay = state.config.ack_delay
        self._batch_size = state.config.ack_batch
        self.pending = Acks()
        self.acking: set[int] = set()
        self._uncertain: set[int] = set()  # in a flush whose outcome a connection error hid
        # Outcomes found busy, waiting for their pause to end: job id -> (list of Acks it goes back
        # to, the item, its progress, its follow-ups); and each busy job's next pause.
        self._parked: dict[int, tuple[str, tuple[Any, ...], str | None, list[JobSpec] | None]] = {}
        self._busy_pause: dict[int, float] = {}
        self._first_at = 0.0
        self._event = asyncio.Event()  # something is pending
        self._full = asyncio.Event()  # a batch is full: send now
        self.idle = asyncio.Event()
        self.idle.set()
        self._now = False  # shutdown: send without waiting for ack_delay

    def complete(self, claim: Claim, result: JSON, follow_ups: list[JobSpec] | None = None) -> None:
        """Queue the completion of `claim` with `result`; `follow_ups`: jobs enqueued in the same
        transaction if it succeeds."""
        self.pending.completes.append((claim, result))
        if follow_ups:
            self.pending.follow_ups[claim.id] = follow_ups
        self._pending()

    def fail(self, claim: Claim, error: str, retry_in: float | None, final: bool,
             follow_ups: list[JobSpec] | None = None) -> None:
        """Queue a failure of `claim` (retried in `retry_in` seconds unless `final`); `follow_ups`:
        jobs enqueued in the same transaction if the job fails for good."""
        self.pending.fails.append((claim, error, retry_in, final))
        if follow_ups:
            self.pending.follow_ups[claim.id] = follow_ups
        self._pending()

    def snooze(self, claim: Claim, delay: float) -> None:
        """Queue `claim`'s return to the queue in `delay` seconds, its attempt given back (0 at
        shutdown: a release)."""
        self.pending.snoozes.append((claim, delay))
        self._pending()

    def progress(self, job_id: int, progress: str) -> None:
        """Store `progress` (JSON text) with the outcome of `job_id`, queued next."""
        self.pending.progress[job_id] = progress

    def unsent_ids(self) -> list[int]:
        """The ids of the jobs whose outcome is not acknowledged yet (pending or busy), sorted."""
        return sorted({c.id for c in self.pending.claims()} | set(self._parked))

    def flush_all(self) -> None:
        """Send everything pending at once, and from now on without waiting (shutdown)."""
        self._now = True
        if len(self.pending):
            self._event.set()

    def _pending(self) -> None:
        if not self._event.is_set():
            self._first_at = time.monotonic()
            self._event.set()
            self.idle.clear()
        if len(self.pending) >= self._batch_size:
            self._full.set()

    async def run(self) -> None:
        """The flush loop (runs until cancelled)."""
        state = self._state
        failures = 0
        while True:
            await self._event.wait()
            wait = self._first_at + self._delay - time.monotonic()
            if wait > 0 and not self._now and not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._full.wait()
            batch, self.pending = self.pending, Acks()
            self._event.clear()
            self._full.clear()
            unsent = await self._send(batch)
            if len(unsent):
                failures += 1
                # Put them back in front of whatever arrived meanwhile and try again after a pause.
                self.pending.completes[:0] = unsent.completes
                self.pending.fails[:0] = unsent.fails
                self.pending.snoozes[:0] = unsent.snoozes
                self.pending.progress.update(batch.progress)
                self.pending.follow_ups.update(batch.follow_ups)
                self._pending()
                delay = min(0.05 * 2 ** min(failures, 10), 2.0) * JITTER.uniform(0.5, 1.0)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await state.aborting.wait()
                continue
            failures = 0
            if not self._event.is_set() and not self._parked:
                self.idle.set()
                if not state.acks_hold_claims():
                    state.slot_freed()  # claims may have waited for this backlog to clear

    async def _ack(self, op: _ops.Operation[AckT], items: Sequence[tuple[Any, ...]]) -> AckT | None:
        """Run one acknowledgement statement; on a connection error report it and return None (the
        caller keeps `items` to send again: every acknowledgement is fenced, so resending is safe)."""
        try:
            return await self._queue._run(op)
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            for item in items:
                self._uncertain.add(item[0].id)
            logger.warning("could not acknowledge %d jobs (%s); retrying", len(items), one_line(exc),
                           extra={"event": "ack_retry"})
            return None

    async def _send(self, batch: Acks) -> Acks:
        """Send a batch (one statement per kind of outcome); return what could not be sent."""
        ids = [c.job.id for c in batch.claims()]
        self.acking.update(ids)
        unsent = Acks()
        try:
            progress = batch.progress or None
            follow_ups = batch.follow_ups or None
            if batch.completes and not await self._send_completes(batch.completes, progress, follow_ups):
                unsent.completes = batch.completes
            if batch.fails and not await self._send_fails(batch.fails, progress, follow_ups):
                unsent.fails = batch.fails
            if batch.snoozes and not await self._send_snoozes(batch.snoozes, progress):
                unsent.snoozes = batch.snoozes
        except Exception:
            # A bug, or bad data the database refused: never retried, never allowed to stop the
            # worker. Those jobs keep their leases until they expire and are rescued.
            logger.exception("acknowledging %d jobs failed; they will be rescued after their lease", len(ids),
                             extra={"event": "ack_error"})
            unsent_ids = {c.id for c in unsent.claims()}
            for claim in batch.claims():
                if claim.id not in unsent_ids:
                    self._state.inflight.pop(claim.id, None)
        finally:
            self.acking.difference_update(ids)
        return unsent

    async def _send_completes(self, completes: list[tuple[Claim, JSON]], progress: dict[int, str] | None,
                              follow_ups: dict[int, list[JobSpec]] | None) -> bool:
        busy: set[int] = set()
        try:
            done = await self._ack(_ops.complete([(c, r, None) for c, r in completes], raise_lost=False,
                                                 progress=progress, follow_ups=follow_ups, busy=busy), completes)
        except psycopg.Error as exc:
            if not follow_ups or len(completes) == 1:
                raise
            # The database refused something, most likely a follow-up job (a parent id that is no
            # job): one at a time, so that the others' completions are not held back by it.
            logger.warning("a batch of completions with follow-up jobs was refused (%s); sending them one "
                           "by one", one_line(exc), extra={"event": "ack_error"})
            for item in completes:
                await self._send_one_complete(item, progress, follow_ups)
            return True
        if done is None:
            return False
        count = self._state.count
        for item in completes:
            claim = item[0]
            if busy and claim.id in busy:
                self._park("completes", item, progress, follow_ups)
                continue
            status = done.get(claim.job.id)
            if status is not None:
                count("succeeded" if status == JobStatus.SUCCEEDED else "retried", claim.job)
            self._settled(claim, status is not None, "complete")
        return True

    async def _send_one_complete(self, item: tuple[Claim, JSON], progress: dict[int, str] | None,
                                 follow_ups: dict[int, list[JobSpec]]) -> None:
        """Complete one attempt with its follow-ups; when the database refuses them, fail the attempt
        with the reason instead (its retry policy applies), so the refusal shows on the job."""
        claim = item[0]
        try:
            if not await self._send_completes([item], progress, follow_ups):
                self.complete(claim, item[1], follow_ups.get(claim.id))  # connection error: again later
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                raise
            logger.error("job %d %s: its follow-up jobs were refused: %s", claim.id, claim.job.kind, one_line(exc),
                         extra=job_extra(claim.job, "follow_up_refused"))
            final = claim.job.attempts >= claim.job.max_attempts
            self.fail(claim, f"follow-up jobs refused by the database: {one_line(exc)}", None, final)

    async def _send_fails(self, fails: list[tuple[Claim, str, float | None, bool]],
                          progress: dict[int, str] | None, follow_ups: dict[int, list[JobSpec]] | None) -> bool:
        busy: set[int] = set()
        failed = await self._ack(_ops.fail(fails, raise_lost=False, progress=progress, follow_ups=follow_ups,
                                           busy=busy), fails)
        if failed is None:
            return False
        state = self._state
        for item in fails:
            claim, _, retry_in, _ = item
            if busy and claim.id in busy:
                self._park("fails", item, progress, follow_ups)
                continue
            job = failed.get(claim.id)
            if job is not None:
                if job.status == JobStatus.QUEUED:
                    state.count("retried", claim.job)
                    state.wake_at(retry_in if retry_in is not None else 1.0)
                else:
                    state.count("failed", claim.job)
            self._settled(claim, job is not None, "fail")
        return True

    async def _send_snoozes(self, snoozes: list[tuple[Claim, float]], progress: dict[int, str] | None) -> bool:
        busy: set[int] = set()
        snoozed = await self._ack(_ops.snooze(snoozes, raise_lost=False, progress=progress, busy=busy), snoozes)
        if snoozed is None:
            return False
        state = self._state
        for item in snoozes:
            claim, delay = item
            if busy and claim.id in busy:
                self._park("snoozes", item, progress, None)
                continue
            ok = claim.id in snoozed
            if ok:
                state.count("snoozed" if delay > 0 or not state.stopping.is_set() else "released", claim.job)
                state.wake_at(delay)
            self._settled(claim, ok, "snooze")
        return True

    def _park(self, kind: str, item: tuple[Any, ...], progress: dict[int, str] | None,
              follow_ups: dict[int, list[JobSpec]] | None) -> None:
        """Hold the outcome `item` (of `self.pending.<kind>`), whose row another transaction had
        locked, and queue it again after its pause; the job keeps its lease meanwhile (the heartbeat
        renews it)."""
        job_id = item[0].id
        pause = self._busy_pause.get(job_id, BUSY_FIRST_PAUSE)
        self._busy_pause[job_id] = min(pause * 2, BUSY_MAX_PAUSE)
        self._parked[job_id] = (kind, item, (progress or {}).get(job_id), (follow_ups or {}).get(job_id))
        self.idle.clear()
        asyncio.get_running_loop().call_later(pause, self._unpark, job_id)

    def _unpark(self, job_id: int) -> None:
        entry = self._parked.pop(job_id, None)
        if entry is None:
            return
        kind, item, progress, follow_ups = entry
        getattr(self.pending, kind).append(item)
        if progress is not None:
            self.pending.progress.setdefault(job_id, progress)
        if follow_ups:
            self.pending.follow_ups[job_id] = follow_ups
        self._pending()

    def _settled(self, claim: Claim, ok: bool, operation: str) -> None:
        # Once per acknowledged job: the id read once (Claim.id is a property), the set of uncertain
        # ids (almost always empty) only looked at when it holds any.
        job = claim.job
        job_id = job.id
        inflight = self._state.inflight
        if inflight.get(job_id) is claim:
            del inflight[job_id]
        if self._busy_pause:
            self._busy_pause.pop(job_id, None)
        uncertain = False
        if self._uncertain:
            uncertain = job_id in self._uncertain
            self._uncertain.discard(job_id)
        if ok:
            return
        if uncertain:  # an earlier try may have gone through before the connection failed
            logger.info("job %d %s: %s not applied: acknowledged before a connection error, or lease lost",
                        job.id, job.kind, operation, extra=job_extra(job, "lease_lost"))
            return
        self._state.count("lost", job)
        logger.warning("job %d %s: %s refused: lease lost (rescued after lease expiry, cancelled, or "
                       "finished elsewhere)", job.id, job.kind, operation, extra=job_extra(job, "lease_lost"))
