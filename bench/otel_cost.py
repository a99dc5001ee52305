#!/usr/bin/env python3
"""The cost of tracing (pgq.otel): enqueues and a worker's drain with the App instrumented and not.

    python3 bench/otel_cost.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 2000 --reps 2]

"on" is an App instrumented with the OpenTelemetry SDK (every span sampled, sent to a batch span
processor whose exporter drops them: the SDK's own cost and pgq's, no network); "off" is the same App
not instrumented, which runs exactly the code of a pgq without tracing but for one attribute read per
enqueue and per attempt (the ABBA of `pgq bench --workload w3` checks that separately). Three
measurements, each in ABBA order (off, on, on, off) `--reps` times:

- single enqueues (`Queue.enqueue`, one statement each; traced: a transaction of two): µs per job;
- batch enqueues (`enqueue_many` of 500): µs per job;
- a drain of `--jobs` no-op jobs by a worker in this process (concurrency 8), enqueued beforehand
  while the queue was paused (traced jobs carry a context, so the worker reads it and parents its
  consumer spans): jobs/s between the first start and the last finish (database clock).

Prints one line per run, the means and their ratio (on / off), then one JSON line. A scratch database
is created, migrated and dropped (see bench/churn.py). Needs the `otel` extra and opentelemetry-sdk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from churn import scratch_database
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import pgq
import pgq.otel

QUEUE = "bench"


class Discard(SpanExporter):
    """An exporter that drops what it is given: what is measured is the tracing, not the shipping."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Drop `spans`."""
        return SpanExportResult.SUCCESS


def build(dsn: str, provider: TracerProvider | None) -> pgq.App:
    """An App with one no-op task; instrumented with `provider` unless None."""
    app = pgq.App(dsn)

    @app.task(name="noop", queue=QUEUE)
    def noop(n: int = 0) -> None:
        """Nothing: the cost measured is pgq's and the tracer's."""

    if provider is not None:
        pgq.otel.instrument(app, tracer_provider=provider)
    return app


def single(app: pgq.App, jobs: int) -> float:
    """µs per job of `jobs` single enqueues."""
    queue = app.queue
    started = time.perf_counter()
    for n in range(jobs):
        queue.enqueue("noop", {"n": n})
    return (time.perf_counter() - started) / jobs * 1e6


def batch(app: pgq.App, jobs: int) -> float:
    """µs per job of enqueues in batches of 500."""
    queue = app.queue
    started = time.perf_counter()
    for first in range(0, jobs, 500):
        queue.enqueue_many([pgq.JobSpec("noop", {"n": n}, queue=QUEUE) for n in range(first, min(jobs, first + 500))])
    return (time.perf_counter() - started) / jobs * 1e6


def drain(app: pgq.App, jobs: int) -> float:
    """Jobs/s of a worker draining `jobs` no-op jobs enqueued while the queue was paused."""
    queue = app.queue
    queue.pause(QUEUE)
    ids = queue.enqueue_many([pgq.JobSpec("noop", {"n": n}, queue=QUEUE) for n in range(jobs)])
    worker = pgq.Worker(app, queues=[QUEUE], concurrency=8, poll_interval=0.05, maintenance=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        queue.resume(QUEUE)
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            while True:
                row = conn.execute("SELECT count(*) FILTER (WHERE status <> 'succeeded'), "
                                   "extract(epoch FROM max(finished_at) - min(started_at)) "
                                   "FROM pgq.jobs WHERE id = ANY(%s)", [ids]).fetchone()
                assert row is not None
                if row[0] == 0:
                    return jobs / float(row[1])
                time.sleep(0.05)
    finally:
        worker.stop()
        thread.join()


def abba(name: str, measure: Callable[[pgq.App], float], apps: dict[str, pgq.App], reps: int,
         unit: str) -> dict[str, float]:
    """Run `measure` in off, on, on, off order `reps` times; print each run; return the means."""
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(reps):
        for which in ("off", "on", "on", "off"):
            value = measure(apps[which])
            runs[which].append(value)
            print(f"{name} {which}: {value:,.1f} {unit}", flush=True)
    means = {which: statistics.fmean(values) for which, values in runs.items()}
    print(f"{name}: off {means['off']:,.1f}, on {means['on']:,.1f} {unit} (on / off {means['on'] / means['off']:.3f})",
          flush=True)
    return means


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    apps = {"off": build(dsn, None), "on": build(dsn, provider)}
    try:
        single_us = abba("single enqueue", lambda app: single(app, args.jobs), apps, args.reps, "us/job")
        batch_us = abba("batch enqueue", lambda app: batch(app, args.jobs * 5), apps, args.reps, "us/job")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs")
        # A worker runs once, and drain() needs an App per run: rebuild them each time.
        rates = abba("drain", lambda app: drain(build(dsn, provider if app is apps["on"] else None), args.jobs),
                     apps, args.reps, "jobs/s")
    finally:
        for app in apps.values():
            app.close()
        provider.shutdown()
    return {"workload": "otel_cost", "jobs": args.jobs, "reps": args.reps,
            "single_enqueue_us": single_us, "batch_enqueue_us": batch_us, "drain_jobs_per_s": rates,
            "single_ratio": single_us["on"] / single_us["off"], "batch_ratio": batch_us["on"] / batch_us["off"],
            "drain_ratio": rates["on"] / rates["off"]}


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run in a scratch database, print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="server to create the scratch database on")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per single-enqueue run and per drain "
                        "(batch runs enqueue five times as many; default 2000)")
    parser.add_argument("--reps", type=int, default=2, help="ABBA pairs of each measurement (default 2)")
    args = parser.parse_args(argv)
    with scratch_database(args.dsn, "pgq_otel") as dsn:
        print(json.dumps(run(dsn, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
