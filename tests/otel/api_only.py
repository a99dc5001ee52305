"""Run as ``python -m tests.otel.api_only DSN``: pgq.otel with the OpenTelemetry API alone, as the
`otel` extra installs it (importing opentelemetry.sdk fails here). An App instrumented with the
global tracer provider, which nothing has set, enqueues a job whose handler adds a follow-up, and a
worker in this process runs both. Prints one JSON line: the modules of the SDK that got loaded, and
each job's kind, status and stored trace context."""

from __future__ import annotations

import importlib.abc
import json
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class NoSdk(importlib.abc.MetaPathFinder):
    """Makes opentelemetry.sdk, which the `otel` extra does not install, impossible to import."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the otel extra has the API only)")
        return None


def main(dsn: str) -> None:
    sys.meta_path.insert(0, NoSdk())
    import psycopg

    import pgq
    import pgq.otel

    app = pgq.App(dsn)

    @app.task
    def receipt(order: int) -> None:
        pass

    @app.task
    def ship(order: int) -> int:
        pgq.after_success(receipt, {"order": order})
        return order

    pgq.otel.instrument(app)  # the global provider: the API's no-op one, as no SDK set another
    shipped = ship.defer(order=3)
    worker = pgq.Worker(app, concurrency=2, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        app.queue.wait(shipped, timeout=20)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM pgq.jobs WHERE status <> 'succeeded'").fetchone() != (0,):
                threading.Event().wait(0.05)
            jobs = conn.execute("SELECT kind, status::text, trace_context FROM pgq.jobs ORDER BY id").fetchall()
    finally:
        worker.stop()
        thread.join()
        app.close()
    sdk = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
    print(json.dumps({"sdk_modules": sdk, "jobs": [list(j) for j in jobs]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
