"""`Heartbeat`: keeps the leases of every job a worker holds, and stops handlers that lost theirs.

Jobs running, held in the prefetch buffer, or finished and awaiting their acknowledgement are all
leased; one statement every lease/3 renews them all, fenced by each attempt's lease token, and
stores the progress handlers reported since. A job missing from the answer has lost its lease
(cancelled, rescued after expiry, finished elsewhere): its handler is interrupted.

When renewals fail (the database or the network is down), the worker stops the handlers itself
before their leases can expire: a lease runs `lease` seconds from the database's clock when the
renewal ran, which is after the renewal was sent, so a job whose last successful renewal was *sent*
more than `lease` - lease/6 seconds ago (this machine's monotonic clock) is interrupted then, before
a rescue can hand it to another worker. That bounds the time two handlers of one job can run at once
by what the interrupted handler takes to stop (an async handler: until its next await).

The first progress a handler reports in its attempt does not wait for the heartbeat: the lease watch
(every second) starts a renewal of that job's lease alone, as a task of its own that never holds up
the watch, which stores it, so that `set_progress` is seen to work at once; later progress goes with
the heartbeat. One such statement per attempt at most, and
only for attempts that report progress: the per-job path of jobs that do not is unchanged.

Without a LISTEN connection (behind PgBouncer) nobody notifies the worker of a cancellation, so
every `check_every` seconds it reads which of its attempts lost their lease (a read, no write).

The renewal waits at most 50 ms (pgq._ops.jobs.ACK_LOCK_TIMEOUT) for a row lock another transaction
holds: a producer's open transaction holds the row of a running job it named in `depends_on`, in a
watermark enqueue or in Queue.wait until it commits. Past that, the renewal is sent again through the
statement that skips such a row and reports it busy, and the others are renewed. The busy ones get a
patient renewal: a statement of their own, on a connection of its own, that waits for their locks (in
id order) for as long as the producer's transaction lasts, run as a task so that the next renewals of
the others are not held up. While it waits it holds the rows' tuple locks, so the rescue (SKIP
LOCKED) leaves them alone even once their leases expired, and when the producer commits the renewal
gets each row first; it runs the lease from then. Meanwhile those handlers are not stopped for want
of a renewal, up to PATIENT_LEASES leases: past that the statement is cut (its connection severed)
and they are, as after any failed renewal. At most one patient renewal is in flight; rows found busy
meanwhile get the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from .. import _ops
from ..client import AsyncQueue
from ..errors import one_line
from ..models import Claim
from .acks import Acknowledger
from .runner import Runner
from .state import WorkerState

__all__ = ["PATIENT_LEASES", "Heartbeat"]

logger = logging.getLogger("pgq.worker")

PATIENT_LEASES = 10
"""How many leases a patient renewal (of rows another transaction holds locked) may wait before the
worker cuts it and stops those handlers: a bound on a stalled connection, not on producers."""


class Heartbeat:
    """The leases of one run of a worker: `run()` renews them, `watch()` stops handlers whose lease
    is lost or about to run out unrenewed; both as tasks, until cancelled. `check_every`: also read
    lost leases at that period (None: a LISTEN connection reports cancellations)."""

    def __init__(self, state: WorkerState, queue: AsyncQueue, acks: Acknowledger, runner: Runner,
                 *, check_every: float | None) -> None:
        self._state = state
        self._queue = queue
        self._acks = acks
        self._runner = runner
        self._lease = state.config.lease
        self._check_every = check_every
        self._renewed: dict[int, float] = {}  # job id -> monotonic time its last successful renewal was sent
        self._patient: asyncio.Task[None] | None = None  # the patient renewal in flight
        self._waiting: set[int] = set()  # the ids it renews
        self._beating = asyncio.Lock()  # one renewal statement at a time: two would find each other's rows busy
        self._hurry: asyncio.Task[float] | None = None  # the renewal sending first progress, in flight

    async def run(self) -> None:
        """Renew every lease/3 (every second at most while the database fails). Cancelled, it also
        cancels the patient renewal in flight, and waits for it to end."""
        interval = self._lease / 3
        try:
            while True:
                await asyncio.sleep(interval)
                interval = await self.beat()
        finally:
            patient = self._patient
            if patient is not None:
                patient.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await patient

    async def beat(self, only: set[int] | None = None) -> float:
        """One renewal of every lease held (none: nothing sent), or of the jobs in `only`; returns the
        seconds until the next."""
        async with self._beating:
            return await self._beat(only)

    async def _beat(self, only: set[int] | None) -> float:
        lease = self._lease
        acking = self._acks.acking
        state = self._state
        waiting = self._waiting
        claims = [c for i, c in state.inflight.items()
                  if i not in acking and i not in waiting and (only is None or i in only)]
        if not claims:
            return lease / 3
        progress: dict[int, str] = {}
        for claim in claims:
            run = state.running.get(claim.id)
            text = run.context.unsent_progress() if run is not None else None
            if text is not None:
                progress[claim.id] = text
        if only is not None:
            # A renewal for progress only: of the jobs whose progress an earlier renewal did not take.
            claims = [c for c in claims if c.id in progress]
            if not claims:
                return lease / 3
        sent = time.monotonic()
        busy: set[int] = set()
        try:
            renewed = await self._queue._run(
                _ops.heartbeat([(c, lease) for c in claims], raise_lost=False, progress=progress, busy=busy))
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            self._unsent(progress)
            logger.warning("heartbeat of %d jobs failed (%s); retrying", len(claims), one_line(exc),
                           extra={"event": "heartbeat_error"})
            return min(lease / 3, 1.0)
        except Exception:
            self._unsent(progress)
            logger.exception("heartbeat failed", extra={"event": "heartbeat_error"})
            return lease / 3
        for job_id in renewed:
            self._renewed[job_id] = sent
        if busy:
            self._unsent({i: p for i, p in progress.items() if i in busy})  # goes with a later renewal
            if self._patient is None:
                held = [c for c in claims if c.id in busy]
                self._waiting = {c.id for c in held}
                self._patient = asyncio.create_task(self._renew_patiently(held), name="pgq-patient-heartbeat")
        lost = [c for c in claims if c.id not in renewed and c.id not in busy]
        if lost:
            await self._check(lost)  # one read, only on a loss: was it a cancel or a rescue?
        for job_id in [i for i in self._renewed if i not in state.inflight]:
            del self._renewed[job_id]
        return lease / 3

    async def _renew_patiently(self, claims: list[Claim]) -> None:
        """The patient renewal of `claims` (see the module docstring), on a connection of the pool
        that it closes when cancelled (the server cancels the statement) or cut."""
        pool = self._queue.pool
        try:
            conn = await pool.getconn()
            try:
                renewed = await self._wait_for_rows(conn, claims)
            finally:
                await pool.putconn(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            logger.warning("patient heartbeat of %d jobs failed (%s)", len(claims), one_line(exc),
                           extra={"event": "heartbeat_error"})
            return
        finally:
            self._patient = None
            self._waiting = set()
        got = time.monotonic()
        for job_id in renewed:
            # The lease runs from when the statement got the row, before its answer came back.
            self._renewed[job_id] = got
        lost = [c for c in claims if c.id not in renewed]
        if lost:
            await self._check(lost)

    async def _wait_for_rows(self, conn: psycopg.AsyncConnection[Any], claims: list[Claim]) -> set[int]:
        """Run the waiting renewal of `claims` on `conn`; cancelled, ask the server to cancel the
        statement and close `conn` (the pool then discards it)."""
        lease = self._lease
        op = _ops.heartbeat([(c, lease) for c in claims], raise_lost=False, busy=set(), wait=True)
        try:
            with _ops.AsyncWatchdog(conn, PATIENT_LEASES * lease):
                renewed = await _ops.run_async(conn, op, own_transaction=True)
            if not conn.autocommit:
                await conn.commit()
            return renewed
        except BaseException:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.cancel_safe(timeout=1.0)
            await conn.close()
            raise

    def _unsent(self, progress: dict[int, str]) -> None:
        # Progress a failed heartbeat carried goes with the next one.
        for job_id in progress:
            run = self._state.running.get(job_id)
            if run is not None:
                run.context.progress_sent = 0

    def _lost(self, claims: list[Claim], reasons: dict[int, str] | None = None) -> None:
        """Interrupt the attempts of `claims` whose lease the database no longer has, for
        `reasons[id]` (default "lease lost": a renewal cannot tell a cancel from a rescue)."""
        inflight, acking = self._state.inflight, self._acks.acking
        for claim in claims:
            # Lost only if still ours and not acknowledged meanwhile (an ack racing the heartbeat
            # also makes the row "not running under this token").
            if inflight.get(claim.id) is claim and claim.id not in acking:
                self._runner.interrupt(claim.id, claim.token, (reasons or {}).get(claim.id, "lease lost"))

    async def watch(self) -> None:
        """Every second (or `check_every`, or lease/24, whichever is shortest): interrupt the handlers
        whose lease may run out before a renewal lands, and without LISTEN read lost leases."""
        margin = self._lease / 6
        # A check a quarter of the margin late still stops the handler 3/4 of the margin early.
        period = min(1.0, margin / 4, self._check_every or 1.0)
        next_check = time.monotonic() + (self._check_every or 0.0)
        try:
            while True:
                await asyncio.sleep(period)
                self._hurry_first_progress()
                self._expiring(time.monotonic(), margin)
                if self._check_every is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self._check_every
                    await self._check()
        finally:
            hurry = self._hurry
            if hurry is not None:
                hurry.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hurry

    def _hurry_first_progress(self) -> None:
        """Start a renewal of the leases of the attempts that reported their first progress since the
        last call, which stores that progress (see the module docstring). It runs as a task, so that
        a renewal waiting on the database (or on the heartbeat's) never holds up the lease watch;
        while one is in flight, attempts that report meanwhile wait for the next call."""
        if self._hurry is not None and not self._hurry.done():
            return
        first = set()
        for job_id, run in self._state.running.items():
            context = run.context
            if context.progress is not None and not context.progress_hurried:
                context.progress_hurried = True
                first.add(job_id)
        if first:
            self._hurry = asyncio.create_task(self.beat(first), name="pgq-first-progress")

    def _expiring(self, now: float, margin: float) -> None:
        state = self._state
        deadline = now + margin - self._lease  # renewed (or claimed) before this: too old
        waiting = self._waiting  # a patient renewal in flight: the rescue cannot take them
        for job_id, run in list(state.running.items()):
            if job_id in waiting:
                continue
            if run.interrupted is None and self._renewed.get(job_id, run.claimed_at) < deadline:
                logger.warning("job %d %s: lease not renewed for %.1f s (database unreachable?)", job_id,
                               run.claim.job.kind, now - self._renewed.get(job_id, run.claimed_at),
                               extra={"event": "lease_expiring", "job_id": job_id})
                self._runner.interrupt(job_id, run.claim.token, "lease lost")
        for claim, claimed_at in list(state.held):
            if claim.id not in waiting and self._renewed.get(claim.id, claimed_at) < deadline:
                self._runner.interrupt(claim.id, claim.token, "lease lost")

    async def _check(self, claims: list[Claim] | None = None) -> None:
        """Read which of `claims` (None: every attempt held and not being acknowledged) lost their
        lease, and why; interrupt those."""
        if claims is None:
            acking = self._acks.acking
            claims = [c for i, c in self._state.inflight.items() if i not in acking]
        if not claims:
            return
        try:
            lost = await self._queue._run(_ops.lease_check(claims))
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled):
            return  # the heartbeat reports the outage
        self._lost([c for c in claims if c.id in lost], lost)
