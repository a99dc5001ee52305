"""The App of the tracing tests, and, run as ``python -m tests.otel.otel_app DSN SPANS_JSON``, an
instrumented worker process that records its spans with the SDK's in-memory exporter and writes
them to SPANS_JSON as it exits (SIGTERM drains it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgq
import pgq.otel


def build(dsn: str) -> pgq.App:
    """An App whose `ship` job enqueues a follow-up (`notify`, after its success) and, from inside
    its handler, an `audit` job that fails for good."""
    app = pgq.App(dsn)

    @app.task
    def notify(order: int) -> str:
        return f"notified {order}"

    @app.task(max_attempts=1)
    def audit(order: int) -> None:
        raise pgq.PermanentFailure(f"audit of order {order} refused")

    @app.task
    def ship(order: int) -> dict[str, int]:
        pgq.after_success(notify, {"order": order})
        audit.defer(order=order)
        return {"shipped": order}

    return app


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that keeps every finished span in memory."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def record(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a finished span, as JSON."""
    context, parent = span.get_span_context(), span.parent
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


def main(dsn: str, out: str) -> None:
    """Run an instrumented worker until SIGTERM, then write its spans to `out`."""
    provider, exporter = tracing()
    app = build(dsn)
    pgq.otel.instrument(app, tracer_provider=provider)
    pgq.Worker(app, concurrency=2, poll_interval=0.05).run()
    app.close()
    Path(out).write_text(json.dumps([record(s) for s in exporter.get_finished_spans()]))


if __name__ == "__main__":
    main(*sys.argv[1:])
