"""`Runner`: runs each claimed job's handler in a slot and queues the acknowledgement of its outcome.

An `async def` handler runs in a task of its own on the worker's loop; a plain `def` handler runs in
the worker's daemon threads (`Threads`), so a slow handler never blocks claims, heartbeats or
shutdown. A sync handler without a timeout needs no task at all: its thread hands the outcome back
to the loop in a callback (a task awaits the ones with a timeout, and abandons them when late).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from .. import _ops
from ..bounds import Undecodable
from ..client import AsyncQueue
from ..context import JobContext, _current
from ..errors import InvalidJob, one_line
from ..models import Claim, Job, JobSpec, TracedJobSpec
from ..tasks import AnyTask
from .acks import Acknowledger
from .outcome import FINISH_LEVELS, HandlerTimeout, Rejected, Verdict, clip, finish_sink, job_extra, verdict
from .state import ProcessSpan, ProcessTracer, Running, WorkerState
from .threads import Threads, retrieve

__all__ = ["UNKNOWN_KIND_BACKOFF", "UNKNOWN_KIND_ERROR", "PrepareFailed", "Runner", "async_call", "sync_call",
           "unknown_kind_delay"]

logger = logging.getLogger("pgq.worker")

UNKNOWN_KIND_BACKOFF: tuple[float, float] = (30.0, 300.0)
"""Seconds after which a job of a kind the worker's app does not know is due again: the first
value at first, doubled each round (a hand-back of that kind at least the current delay after the
last doubling) up to the second. Kept per kind by each worker run."""

UNKNOWN_KIND_ERROR = "no worker of queue {queue!r} knows kind {kind!r} (handed back by worker {worker})"
"""The last_error stored with a job handed back for its unknown kind. sql/queue_unknown_kinds.sql
counts the jobs by its start: keep 'no worker of queue % knows kind %' in step with it."""


class PrepareFailed(Exception):
    """What an attempt failed with when preparing it (before its handler was called) raised: its
    span could not start, its context could not be built. A job whose stored payload cannot be
    decoded is rejected instead (failed for good: no retry can decode it)."""


class Runner:
    """Runs handlers for one run of a worker; `start` puts a claimed job in a free slot."""

    def __init__(self, state: WorkerState, tasks: Mapping[str, AnyTask], threads: Threads,
                 acks: Acknowledger, queue: AsyncQueue, tracer: ProcessTracer | None = None) -> None:
        self._state = state
        self._tracer = tracer  # pgq.otel: every attempt runs in a consumer span
        self._tasks = tasks
        self._threads = threads
        self._acks = acks
        self._queue = queue
        self._running = state.running
        self._unknown_delay: dict[str, tuple[float, float]] = {}  # kind: (delay s, monotonic time set)
        self._unknown_warned: set[tuple[str, str]] = set()  # (kind, queue)

    def start(self, claim: Claim, claimed_at: float) -> None:
        """Start `claim`'s handler (the caller made sure a slot is free). Whatever fails while the
        attempt is prepared (its payload cannot be decoded, its trace span cannot start) fails that
        attempt with the reason and frees the slot: one job never keeps a slot or stops the others."""
        job = claim.job
        self._state.count("claimed", job)
        run = Running(claim, claimed_at, JobContext(claim, claimed_at, self._tasks))
        self._running[job.id] = run
        try:
            self._begin(run)
        except Exception as exc:
            self.prepare_failed(run, exc)

    def _begin(self, run: Running) -> None:
        job = run.claim.job
        task = self._tasks.get(job.kind)
        if self._tracer is not None:
            run.task = asyncio.get_running_loop().create_task(self._execute_traced(run, self._tracer))
            return
        if task is not None and not task.is_async and task.timeout is None:
            # A sync handler that needs no timeout: straight to a thread, its outcome handled by a
            # callback on the loop. No task or future per job, which for short handlers is a good
            # part of the worker's own CPU time per job.
            try:
                kwargs = task.check_arguments(job.payload)
            except InvalidJob:
                pass  # _execute rejects it, with the reason
            else:
                self._log_start(job)
                run.started = time.monotonic()
                self._threads.call(sync_call(task, kwargs, run.context),
                                   functools.partial(self._sync_done, run, task))
                return
        run.task = asyncio.get_running_loop().create_task(self._execute(run))

    def prepare_failed(self, run: Running, exc: Exception) -> None:
        """The attempt of `run` failed before its handler was called (`exc`): fail it as a
        PrepareFailed (retried as the task's retry policy says, like a handler's error), log it and
        free its slot."""
        job = run.claim.job
        logger.error("job %d %s: its attempt could not be prepared: %s", job.id, job.kind, one_line(exc),
                     extra={**job_extra(job, "job_prepare_error"), "error": one_line(exc)})
        failed = PrepareFailed(f"the attempt could not be prepared: {type(exc).__name__}: {one_line(exc)}")
        failed.__cause__ = exc
        run.started = time.monotonic()
        outcome, error = "released", None
        try:
            outcome, error = self._conclude(run, self._tasks.get(job.kind), None, failed)
        finally:
            self.end_run(run, outcome, error)

    def interrupt(self, job_id: int, token: str | None, reason: str) -> bool:
        """Stop the attempt `job_id` runs under lease `token` (None: whichever), because of `reason`
        ("cancelled" or "lease lost"): a prefetched job is dropped before it starts; a running async
        handler is cancelled (CancelledError at its next await); a sync handler's
        `cancel_requested()` turns True, and its slot stays taken until it returns. No outcome is sent
        for it. Returns whether this worker held the attempt."""
        state = self._state
        claim = state.inflight.get(job_id)
        if claim is None or (token is not None and claim.token != token):
            return False
        run = self._running.get(job_id)
        if run is None:
            held = next((h for h in state.held if h[0] is claim), None)
            if held is None:
                return False  # finished, awaiting its acknowledgement: that will be refused or lands
            state.held.remove(held)
            del state.inflight[job_id]
            state.traces.pop(job_id, None)  # it never starts: its trace context is not read
            self._log_interrupt(claim.job, reason, "before it started")
            return True
        if run.interrupted is not None or run.released:
            return True
        run.interrupted = reason
        run.context.cancelled = True
        task = self._tasks.get(claim.job.kind)
        if run.task is not None and task is not None and task.is_async:
            run.task.cancel()
        self._log_interrupt(claim.job, reason, "its handler is being stopped")
        return True

    def on_cancel(self, payload: str) -> None:
        """A notification on channel pgq_cancel: `payload` is '<job id>:<md5 of the lease token>' of
        an attempt that was cancelled (revision 0032; before it, the token itself, which is matched
        too while the schema is older than the worker); interrupt it if this worker holds it."""
        job_id, _, mark = payload.partition(":")
        if not (job_id.isdigit() and mark):
            return
        claim = self._state.inflight.get(int(job_id))
        if claim is not None and mark in (claim.token, hashlib.md5(claim.token.encode(), usedforsecurity=False)
                                          .hexdigest()):
            self.interrupt(int(job_id), claim.token, "cancelled")

    def _log_interrupt(self, job: Job, reason: str, what: str) -> None:
        self._state.count("lost" if reason == "lease lost" else "cancelled", job)
        level = logging.INFO if reason == "cancelled" else logging.WARNING
        logger.log(level, "job %d %s: %s; %s", job.id, job.kind, reason, what,
                   extra={**job_extra(job, "job_interrupt"), "reason": reason})

    def _log_start(self, job: Job) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("job %d %s attempt %d/%d: started", job.id, job.kind, job.attempts, job.max_attempts,
                         extra=job_extra(job, "job_start"))

    async def _execute_traced(self, run: Running, tracer: ProcessTracer) -> None:
        # The span is current in this task's context, which a sync handler's thread copies. A span
        # that cannot start fails the attempt (prepare_failed) instead of leaving its slot taken.
        job = run.claim.job
        with contextlib.ExitStack() as stack:
            try:
                run.span = stack.enter_context(tracer.process(job, self._state.traces.pop(job.id, None)))
            except Exception as exc:
                self.prepare_failed(run, exc)
                return
            await self._execute(run)

    async def _execute(self, run: Running) -> None:
        claim = run.claim
        job = claim.job
        task = self._tasks.get(job.kind)
        self._log_start(job)
        run.started = time.monotonic()
        outcome, error = "released", None
        try:
            value: Any = None
            failed: BaseException | None = None
            try:
                if task is None:
                    outcome = await self._hand_back(run)
                    return
                if isinstance(job.payload, Undecodable):
                    raise Rejected(f"its stored payload cannot be decoded ({job.payload.reason}; "
                                   f"{job.payload.size} bytes)")
                try:
                    kwargs = task.check_arguments(job.payload)
                except InvalidJob as exc:
                    raise Rejected(str(exc)) from None
                value = await self._call(task, kwargs, run)
            except asyncio.CancelledError as exc:
                current = asyncio.current_task()
                if run.interrupted is not None and current is not None and current.cancelling():
                    current.uncancel()  # our own interruption: the run ends here, with no outcome to send
                    outcome = run.interrupted
                    return
                if run.released or (current is not None and current.cancelling()):
                    raise
                failed = exc  # raised by the handler itself: a failure like any other
            except BaseException as exc:  # SystemExit, KeyboardInterrupt from a handler: still just a failure
                failed = exc
            outcome, error = self._conclude(run, task, value, failed)
        finally:
            self.end_run(run, outcome, error)

    async def _hand_back(self, run: Running) -> str:
        """A job of a kind this worker's app has no task for: not a failure, since another worker
        (a newer deploy, or one serving other kinds) may know it. Store why on the job, then give it
        back to its queue without spending an attempt, due after the kind's backoff. Warn once per
        (kind, queue). Returns the run's outcome."""
        claim = run.claim
        job = claim.job
        worker = self._state.config.claimed_by
        low, high = UNKNOWN_KIND_BACKOFF
        delay = unknown_kind_delay(self._unknown_delay, job.kind, time.monotonic(), low, high)
        if (job.kind, job.queue) not in self._unknown_warned:
            self._unknown_warned.add((job.kind, job.queue))
            known = ", ".join(sorted(self._tasks)) or "none"
            logger.warning("queue %r has jobs of kind %r, which no task of this worker's app knows (known: %s): "
                           "handing them back without spending an attempt, due again in %g s at first (up "
                           "to %g s), until a worker that knows the kind runs them", job.queue, job.kind,
                           known, low, high, extra={**job_extra(job, "job_unknown_kind"), "worker": worker})
        error = UNKNOWN_KIND_ERROR.format(queue=job.queue, kind=job.kind, worker=worker)
        if job.last_error != error:  # the same worker meeting it again has nothing new to say
            try:
                await self._queue._run(_ops.error_set(claim, error))
            except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
                # Only the reason is lost; the hand-back below is retried by the acknowledger.
                logger.warning("job %d %s: could not store why it is handed back (%s)", job.id, job.kind,
                               one_line(exc), extra=job_extra(job, "job_unknown_kind"))
        if run.interrupted is not None:
            return run.interrupted
        if run.released:  # shutdown handed it back while the reason was being stored
            return "released"
        self._acks.snooze(claim, delay)
        return "unknown kind"

    def _sync_done(self, run: Running, task: AnyTask, value: Any, failed: BaseException | None) -> None:
        # On the loop, once a sync handler started by `start` returned or raised.
        if run.released:  # handed back at shutdown while it ran (and reported then)
            return
        outcome, error = "released", None
        try:
            outcome, error = self._conclude(run, task, value, failed)
        finally:
            self.end_run(run, outcome, error)

    def _conclude(self, run: Running, task: AnyTask | None, value: Any,
                  failed: BaseException | None) -> tuple[str, str | None]:
        """Queue the acknowledgement of an attempt that returned `value` or raised `failed`; return
        its outcome and, for a failure, the error summary. An interrupted attempt sends nothing: the
        job is cancelled, or its lease belongs to another attempt now."""
        if run.interrupted is not None:
            return run.interrupted, None
        claim = run.claim
        progress = run.context.unsent_progress()
        if progress is not None:
            self._acks.progress(claim.id, progress)
        decided = verdict(claim, task, value, failed, run.context.follow_ups, self._tasks)
        if run.span is not None:
            decided = self._traced(run.span, decided, failed)
        if decided.failure is not None:
            self._acks.fail(claim, decided.failure.error, decided.failure.retry_in, decided.failure.final,
                            decided.follow_ups)
            return decided.outcome, decided.failure.summary
        if decided.outcome == "snoozed":
            self._acks.snooze(claim, decided.delay)
        else:
            self._acks.complete(claim, decided.result, decided.follow_ups)
        return decided.outcome, None

    @staticmethod
    def _traced(span: ProcessSpan, decided: Verdict, failed: BaseException | None) -> Verdict:
        """Record a failure on the attempt's span; give its follow-up jobs the span's trace context."""
        if decided.failure is not None:
            span.failed(failed if failed is not None else Rejected(decided.failure.summary))
        if not decided.follow_ups:
            return decided
        context = span.trace_context
        if context is None:  # a span that records nothing: the follow-ups store no context
            return decided
        follow_ups: list[JobSpec] = [TracedJobSpec.traced(spec, context) for spec in decided.follow_ups]
        return decided._replace(follow_ups=follow_ups)

    def end_run(self, run: Running, outcome: str, error: str | None) -> None:
        """`run` left its slot with `outcome`: free the slot, log the finish."""
        state = self._state
        job = run.claim.job
        if self._running.get(job.id) is run:
            del self._running[job.id]
        if run.interrupted is not None and state.inflight.get(job.id) is run.claim:
            del state.inflight[job.id]  # no acknowledgement will settle it: it is not ours any more
        seconds = time.monotonic() - run.started
        if run.started:
            state.prefetch.job_ran(seconds)
        state.slot_freed()
        if run.span is not None:
            run.span.ended(outcome)
        self._log_finish(job, outcome, seconds, error)
        if state.stopping.is_set():
            state.run_ended.set()

    async def _call(self, task: AnyTask, kwargs: dict[str, Any], run: Running) -> Any:
        if not task.is_async:  # with a timeout (`start` runs the others): awaited, abandoned when late
            future = self._threads.submit(sync_call(task, kwargs, run.context))
            done, _ = await asyncio.wait({future}, timeout=task.timeout)
            if not done:
                self._abandon(run, future)
                raise HandlerTimeout(task.timeout)
            return future.result()
        return await async_call(task, kwargs, run.context)

    def _abandon(self, run: Running, future: asyncio.Future[Any]) -> None:
        # A sync handler cannot be interrupted: its thread runs on, so its slot stays taken until it
        # returns (the job itself is failed now, and its late result is dropped).
        state = self._state
        state.abandoned += 1
        job = run.claim.job
        logger.warning("job %d %s: sync handler abandoned after its timeout; its thread keeps a slot until "
                       "it returns", job.id, job.kind, extra=job_extra(job, "job_abandon"))

        def returned(late: asyncio.Future[Any]) -> None:
            retrieve(late)  # nobody awaits it any more: no "exception was never retrieved" noise
            state.abandoned -= 1
            state.slot_freed()

        future.add_done_callback(returned)

    def _log_finish(self, job: Job, outcome: str, seconds: float, error: str | None) -> None:
        if outcome not in ("released", "unknown kind"):
            self._state.metrics.job_duration(job.queue, job.kind, seconds)
        level = FINISH_LEVELS.get(outcome, logging.ERROR)
        if not logger.isEnabledFor(level):
            return
        sink = finish_sink()
        if error is None and sink is not None and sink(level, job, outcome, seconds):
            return
        extra = job_extra(job, "job_finish")
        extra.update(outcome=outcome, duration_ms=round(seconds * 1000, 3))
        args: tuple[object, ...]
        if error is None:
            msg, args = "job %d %s attempt %d/%d: %s (%.1f ms)", (job.id, job.kind, job.attempts, job.max_attempts,
                                                                  outcome, seconds * 1000)
        else:
            extra["error"] = error
            msg, args = "job %d %s attempt %d/%d: %s (%.1f ms): %s", (job.id, job.kind, job.attempts,
                                                                      job.max_attempts, outcome, seconds * 1000,
                                                                      clip(error, 500))
        # One line per finished job, at INFO for a success: made without logging's search of the
        # stack for the caller (Logger.findCaller, which no pgq formatter shows), a fifth of the cost.
        logger.handle(logger.makeRecord(logger.name, level, __file__, 0, msg, args, None, extra=extra))


def unknown_kind_delay(rounds: dict[str, tuple[float, float]], kind: str, now: float, low: float,
                       high: float) -> float:
    """Seconds until a job of unknown `kind` handed back at `now` (monotonic seconds) is due again:
    `low` at first; doubled, up to `high`, once per round, a round being a hand-back at least the
    current delay after the last change (the jobs came back and are still unknown). `rounds` holds
    {kind: (delay, when it was set)} between calls, and is updated."""
    delay, since = rounds.get(kind, (low, now))
    if now - since >= delay:
        delay, since = min(delay * 2, high), now
    rounds[kind] = (delay, since)
    return delay


async def async_call(task: AnyTask, kwargs: dict[str, Any], job_context: JobContext) -> Any:
    """Await an async handler with `current_job()` (and `cancel_requested()`, `set_progress()`) this
    run's; past the task's timeout it is cancelled and HandlerTimeout raised."""
    token = _current.set(job_context)
    try:
        if task.timeout is None:
            return await task.func(**kwargs)
        try:
            async with asyncio.timeout(task.timeout) as scope:
                return await task.func(**kwargs)
        except TimeoutError:
            if scope.expired():
                raise HandlerTimeout(task.timeout) from None
            raise
    finally:
        _current.reset(token)


def sync_call(task: AnyTask, kwargs: dict[str, Any], job_context: JobContext) -> Callable[[], Any]:
    """A sync handler's call, for a thread: in a copy of the current context in which
    `current_job()` (and `cancel_requested()`, `set_progress()`) are this run's."""
    context = contextvars.copy_context()
    context.run(_current.set, job_context)
    return functools.partial(context.run, task.func, **kwargs)
