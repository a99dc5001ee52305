"""OpenTelemetry tracing of enqueues and attempts (the `otel` extra: ``pip install "pgq-jobs[otel]"``).

`instrument(app_or_queue)` turns it on, explicitly: installing the extra or setting a tracer provider
changes nothing by itself. `import pgq` never imports opentelemetry, and an uninstrumented App or
Queue pays one attribute read per enqueue and per attempt, nothing more (bench/otel_cost.py
measures both sides).

Once an App is instrumented:

- every enqueue (`Queue.enqueue`, `enqueue_many`, `Task.defer`, the async twins, handlers' enqueues)
  runs in a PRODUCER span ``pgq enqueue <kind>`` ("pgq enqueue batch" for a batch of several kinds),
  child of the caller's current span, with the messaging attributes `messaging.system` "pgq",
  `messaging.operation.type` "send", `messaging.operation.name` "enqueue",
  `messaging.destination.name` (the queue, when the batch has one), `messaging.message.id` (the job
  id, for one job) and `messaging.batch.message_count` (for several);
- the W3C trace context of that span (``{"traceparent": ..., "tracestate": ...}``, as the global
  propagator writes them; no other key, and within revision 0019's bounds) is stored with each new
  job, in the column `pgq.jobs.trace_context` (revision 0015), in the enqueue's transaction;
- the worker runs each attempt in a CONSUMER span ``pgq process <kind>`` whose **parent** is the
  stored context: one job has exactly one enqueuer, so the job is a step of the enqueuer's trace
  (a link would leave every job in a trace of its own, and the request that enqueued it could not be
  followed into it). Each attempt is a new child of the same producer span. Attributes: those of
  the producer (operation "process"), `pgq.job.attempt`, `pgq.job.outcome` ("succeeded", "retry",
  "failed", "snoozed", "cancelled", ...); on a failure the exception is recorded and the status set
  to ERROR;
- follow-up jobs (`after_success`, `on_success`, `on_failure`) carry the consumer span's context, and
  jobs a handler enqueues are children of it, so a workflow is one trace; jobs enqueued with
  `depends_on` carry their enqueuer's context like any other.

A job enqueued by an uninstrumented client has no context: its consumer span starts a new trace, as
does one whose stored context is unusable (`carrier_of`). A producer chooses the trace its jobs join
and their sampled flag, as W3C propagation implies (docs/tracing.md, "Trust").
With the API alone (no SDK, or a provider that records nothing) no context is stored at all.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ModuleNotFoundError as missing:  # the extra is not installed: say which one
    raise ModuleNotFoundError(f"pgq.otel needs the OpenTelemetry API ({missing}); install it with "
                              f"pip install 'pgq-jobs[otel]'", name=missing.name) from missing

from .app import App
from .bounds import MAX_TRACEPARENT_CHARS, MAX_TRACESTATE_CHARS
from .client import AsyncQueue, Queue
from .errors import PgqError
from .models import Job, JobSpec

__all__ = ["SYSTEM", "Tracing", "carrier_of", "instrument", "uninstrument"]

SYSTEM = "pgq"
"""The `messaging.system` of pgq's spans."""


def instrument(app_or_queue: App | Queue | AsyncQueue, *, tracer_provider: TracerProvider | None = None) -> None:
    """Trace the enqueues and attempts of `app_or_queue` (see the module docstring).

    An App: its queues (those made already and those made later, its workers' included) trace
    their enqueues, and its workers trace every attempt; instrument it before its workers start. A
    Queue or AsyncQueue: its own enqueues only. `tracer_provider`: default the global one. Calling it
    again replaces the tracer. Raises PgqError for anything else.
    """
    tracing = Tracing(trace.get_tracer("pgq", tracer_provider=tracer_provider))
    _set(app_or_queue, tracing)


def uninstrument(app_or_queue: App | Queue | AsyncQueue) -> None:
    """Stop tracing `app_or_queue` (a worker already running keeps tracing until it stops)."""
    _set(app_or_queue, None)


def _set(target: App | Queue | AsyncQueue, tracing: Tracing | None) -> None:
    if isinstance(target, App):
        target._otel = tracing
        for queue in target._queues_made():
            queue._otel = tracing
    elif isinstance(target, Queue | AsyncQueue):
        target._otel = tracing
    else:
        raise PgqError(f"instrument needs a pgq App, Queue or AsyncQueue, got {type(target).__name__}")


class Tracing:
    """The spans of one instrumented App or queue: producer spans around enqueues, consumer spans
    around attempts. Built by `instrument`."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def enqueue_started(self, specs: Sequence[JobSpec]) -> EnqueueSpan:
        """Open the PRODUCER span of an enqueue of `specs`, child of the current span."""
        kinds = {s.kind for s in specs}
        queues = {s.queue for s in specs}
        attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                      "messaging.operation.name": "enqueue"}
        if len(queues) == 1:
            attributes["messaging.destination.name"] = next(iter(queues))
        if len(specs) > 1:
            attributes["messaging.batch.message_count"] = len(specs)
        name = f"pgq enqueue {next(iter(kinds))}" if len(kinds) == 1 else "pgq enqueue batch"
        span = self._tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        return EnqueueSpan(span, [_context_of(span)] * len(specs))

    @contextlib.contextmanager
    def process(self, job: Job, trace_context: str | None) -> Iterator[ProcessSpan]:
        """The CONSUMER span of an attempt of `job`, child of its stored `trace_context` (a new trace
        without one), current inside the `with`."""
        carrier = carrier_of(trace_context)
        parent = Context() if carrier is None else propagate.extract(carrier, context=Context())
        span = self._tracer.start_span(
            f"pgq process {job.kind}", context=parent, kind=SpanKind.CONSUMER,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "process",
                        "messaging.operation.name": "process", "messaging.destination.name": job.queue,
                        "messaging.message.id": str(job.id), "pgq.job.attempt": job.attempts})
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            yield ProcessSpan(span)


class EnqueueSpan:
    """The producer span of one enqueue; `contexts` the trace context to store with each job."""

    def __init__(self, span: Span, contexts: list[str | None]) -> None:
        self.span = span
        self.contexts = contexts

    def end(self, ids: list[int] | None, error: BaseException | None) -> None:
        """Close the span: the enqueue returned `ids` (one: its `messaging.message.id`), or raised."""
        if error is not None:
            _record(self.span, error)
        elif ids is not None and len(ids) == 1:
            self.span.set_attribute("messaging.message.id", str(ids[0]))
        self.span.end()


class ProcessSpan:
    """The consumer span of one attempt; `trace_context` is what its follow-up jobs store."""

    def __init__(self, span: Span) -> None:
        self.span = span

    @property
    def trace_context(self) -> str | None:
        """The span's W3C trace context as JSON object text, computed when asked for (only an
        attempt with follow-up jobs needs it); None when the propagator writes none (a span that
        records nothing, such as the API's without an SDK)."""
        return _context_of(self.span)

    def failed(self, error: BaseException) -> None:
        """Record the attempt's failure."""
        _record(self.span, error)

    def ended(self, outcome: str) -> None:
        """Record the attempt's outcome."""
        self.span.set_attribute("pgq.job.outcome", outcome)


def _context_of(span: Span) -> str | None:
    """The W3C trace context of `span` as JSON object text: its traceparent and tracestate only, as
    the database stores them (revision 0019; a tracestate too long is left out, as W3C lets a
    vendor do). None when the propagator writes no traceparent, or one too long to store."""
    written: dict[str, str] = {}
    propagate.inject(written, context=trace.set_span_in_context(span, Context()))
    carrier = _bounded(written)
    return None if carrier is None else json.dumps(carrier, separators=(",", ":"), sort_keys=True)


def carrier_of(trace_context: str | None) -> dict[str, str] | None:
    """The propagation carrier of a stored trace context (JSON object text, from any producer):
    its traceparent and tracestate only, if they are strings within bounds; None when it has no
    usable traceparent (then the attempt's span starts a new trace). Never raises: what a producer
    stored never keeps an attempt from starting."""
    if trace_context is None:
        return None
    try:
        stored = json.loads(trace_context)
    except (ValueError, RecursionError):  # rows written before revision 0019 bounded them
        return None
    return _bounded(stored) if isinstance(stored, dict) else None


def _bounded(context: dict[Any, Any]) -> dict[str, str] | None:
    parent, state = context.get("traceparent"), context.get("tracestate")
    if not isinstance(parent, str) or not parent or len(parent) > MAX_TRACEPARENT_CHARS:
        return None
    if isinstance(state, str) and state and len(state) <= MAX_TRACESTATE_CHARS:
        return {"traceparent": parent, "tracestate": state}
    return {"traceparent": parent}


def _record(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
