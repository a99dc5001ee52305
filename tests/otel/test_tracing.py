"""pgq.otel against a real PostgreSQL and a real worker process: producer spans with the messaging
attributes, the trace context stored with each job, and one trace from an enqueue through the job to
its follow-ups."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.trace import SpanKind, StatusCode

import pgq
import pgq.otel
from pgq.models import JobSpec

from ..conftest import run_until
from .otel_app import build, record, tracing

ROOT = Path(__file__).resolve().parents[2]


def contexts(dsn: str) -> dict[int, Any]:
    """{job id: stored trace context} of every job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT id, trace_context FROM pgq.jobs ORDER BY id").fetchall())


def test_enqueue_spans_follow_the_messaging_conventions_and_store_their_context(pgq_dsn: str) -> None:
    provider, exporter = tracing()
    with pgq.Queue(pgq_dsn) as traced, pgq.Queue(pgq_dsn) as plain:
        pgq.otel.instrument(traced, tracer_provider=provider)
        one = traced.enqueue("email", {"to": "a"}, queue="mail")
        keyed = traced.enqueue("email", {"to": "b"}, queue="mail", dedupe_key="b")
        batch = traced.enqueue_many([JobSpec("email", {"to": "c"}, queue="mail"), JobSpec("sms", queue="mail"),
                                     JobSpec("email", queue="mail", dedupe_key="b")])  # the last dedupes
        dependent = traced.enqueue("after", depends_on=[one])
        untraced = plain.enqueue("email", {"to": "d"})
        with pytest.raises(pgq.InvalidJob):
            traced.enqueue("after", depends_on=[10**9])  # no such parent: nothing written, the span says why
        pgq.otel.uninstrument(traced)
        after_off = traced.enqueue("email")

    async def from_async() -> int:
        async with pgq.AsyncQueue(pgq_dsn) as queue:
            pgq.otel.instrument(queue, tracer_provider=provider)
            return await queue.enqueue("email", {"to": "e"})

    async_id = asyncio.run(from_async())
    spans = [record(s) for s in exporter.get_finished_spans()]
    assert [(s["name"], s["kind"], s["status"]) for s in spans] == [
        ("pgq enqueue email", "PRODUCER", "UNSET"), ("pgq enqueue email", "PRODUCER", "UNSET"),
        ("pgq enqueue batch", "PRODUCER", "UNSET"), ("pgq enqueue after", "PRODUCER", "UNSET"),
        ("pgq enqueue after", "PRODUCER", "ERROR"), ("pgq enqueue email", "PRODUCER", "UNSET"),
    ]
    assert spans[0]["attributes"] == {
        "messaging.system": "pgq", "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        "messaging.destination.name": "mail", "messaging.message.id": str(one)}
    assert spans[2]["attributes"] == {
        "messaging.system": "pgq", "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        "messaging.destination.name": "mail", "messaging.batch.message_count": 3}
    assert spans[4]["attributes"]["messaging.destination.name"] == "default"
    assert spans[4]["attributes"]["error.type"] == "ForeignKeyViolation" and spans[4]["events"] == ["exception"]

    def traceparent(span: dict[str, Any]) -> str:
        return f"00-{span['trace_id']}-{span['span_id']}"  # then the flags (sampled)

    assert batch[2] == keyed
    stored = {job_id: None if c is None else c["traceparent"][:-3] for job_id, c in contexts(pgq_dsn).items()}
    assert stored == {
        one: traceparent(spans[0]), keyed: traceparent(spans[1]),  # the deduplicated enqueue left it alone
        batch[0]: traceparent(spans[2]), batch[1]: traceparent(spans[2]),
        dependent: traceparent(spans[3]), untraced: None, after_off: None, async_id: traceparent(spans[5]),
    }


def test_one_trace_runs_from_the_enqueue_through_the_job_to_its_follow_ups(pgq_dsn: str, tmp_path: Path) -> None:
    provider, exporter = tracing()
    app = build(pgq_dsn)
    pgq.otel.instrument(app, tracer_provider=provider)
    with provider.get_tracer("test").start_as_current_span("POST /orders", kind=SpanKind.SERVER):
        shipped = app.tasks["ship"].defer(order=7)  # type: ignore[call-arg]
    app.close()
    out = tmp_path / "spans.json"

    def finished() -> bool:
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM pgq.jobs WHERE status IN ('succeeded', 'failed')").fetchone() \
                == (3,)

    run_until([sys.executable, "-m", "tests.otel.otel_app", pgq_dsn, str(out)], finished, 30, ROOT)

    spans = {s["name"]: s for s in [record(s) for s in exporter.get_finished_spans()] + json.loads(out.read_text())}
    assert sorted(spans) == ["POST /orders", "pgq enqueue audit", "pgq enqueue ship", "pgq process audit",
                             "pgq process notify", "pgq process ship"]
    assert {s["trace_id"] for s in spans.values()} == {spans["POST /orders"]["trace_id"]}  # one trace

    def parent(name: str) -> str:
        return next(n for n, s in spans.items() if s["span_id"] == spans[name]["parent_id"])

    assert parent("pgq enqueue ship") == "POST /orders"  # in the test process
    assert parent("pgq process ship") == "pgq enqueue ship"  # in the worker process, through the stored context
    assert parent("pgq process notify") == "pgq process ship"  # a follow-up carries its job's context
    assert parent("pgq enqueue audit") == "pgq process ship"  # the handler's own enqueue
    assert parent("pgq process audit") == "pgq enqueue audit"
    process = spans["pgq process ship"]
    assert (process["kind"], process["status"]) == ("CONSUMER", "UNSET")
    assert process["attributes"] == {
        "messaging.system": "pgq", "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": "default", "messaging.message.id": str(shipped), "pgq.job.attempt": 1,
        "pgq.job.outcome": "succeeded"}
    failed = spans["pgq process audit"]
    assert (failed["status"], failed["events"]) == (StatusCode.ERROR.name, ["exception"])
    assert failed["attributes"]["pgq.job.outcome"] == "failed"
    assert failed["attributes"]["error.type"] == "PermanentFailure"


def test_the_api_alone_traces_nothing_and_stores_no_context(pgq_dsn: str) -> None:
    # The otel extra installs opentelemetry-api only: with no SDK (its import blocked) and no tracer
    # provider set, an instrumented App enqueues and runs jobs, and their follow-ups, storing no
    # context at all (the API's spans record nothing, so there is nothing to propagate).
    out = subprocess.run([sys.executable, "-m", "tests.otel.api_only", pgq_dsn], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "sdk_modules": [], "jobs": [["ship", "succeeded", None], ["receipt", "succeeded", None]]}


def test_pgq_otel_without_the_extra_names_the_extra_to_install() -> None:
    # Without OpenTelemetry installed (its import blocked), `import pgq.otel` fails with a message
    # that says what to install; `import pgq` itself needs no OpenTelemetry.
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "import pgq\n"
            "try:\n"
            "    import pgq.otel\n"
            "except ModuleNotFoundError as e:\n"
            "    print(e.name, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    name, message = out.stdout.strip().split(" | ", 1)
    assert name == "opentelemetry"
    assert "pip install 'pgq-jobs[otel]'" in message
