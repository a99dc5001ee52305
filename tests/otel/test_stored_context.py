"""What pgq.otel stores and reads back as a job's trace context: only `traceparent` and
`tracestate`, within the bounds the database enforces (revision 0019), whatever the propagator
writes or a producer stored."""

from __future__ import annotations

import json

import pytest
from opentelemetry import baggage, context, propagate
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import pgq.otel
from pgq.otel import carrier_of

# A value nested past Python's default recursion limit is what these tests feed pgq.
pytestmark = pytest.mark.usefixtures("default_recursion_limit")

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(("stored", "carrier"), [
    (None, None),
    ("not json", None),
    ('{"traceparent": ' + "[" * 5000 + "]" * 5000 + "}", None),
    ("[" * 5000 + "]" * 5000, None),
    (json.dumps({"traceparent": TRACEPARENT, "baggage": "k=" + "v" * 40_000}), {"traceparent": TRACEPARENT}),
    (json.dumps({"traceparent": TRACEPARENT, "tracestate": "a=b"}), {"traceparent": TRACEPARENT, "tracestate": "a=b"}),
    (json.dumps({"traceparent": TRACEPARENT, "tracestate": "a=" + "b" * 600}), {"traceparent": TRACEPARENT}),
    (json.dumps({"traceparent": 7}), None),
    (json.dumps({"traceparent": "0" * 300}), None),
])
def test_a_stored_context_gives_the_propagator_its_traceparent_and_tracestate_only(
        stored: str | None, carrier: dict[str, str] | None) -> None:
    assert carrier_of(stored) == carrier


def test_the_stored_context_holds_no_baggage_and_no_tracestate_past_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", CompositePropagator(
        [TraceContextTextMapPropagator(), W3CBaggagePropagator()]))
    tracing = pgq.otel.Tracing(TracerProvider().get_tracer("t"))
    token = context.attach(baggage.set_baggage("user", "x" * 1000))
    try:
        [stored] = tracing.enqueue_started([pgq.JobSpec("k")]).contexts
    finally:
        context.detach(token)
    assert stored is not None and set(json.loads(stored)) == {"traceparent"}
