"""`import pgq` loads what a producer needs and no more; the worker loads on first use, and what only
some workers use (the metrics server's HTTP) loads when they start it. Each module left out is a few
milliseconds off the start-up of every process that imports pgq."""

from __future__ import annotations

import subprocess
import sys


def test_import_pgq_leaves_the_worker_unloaded_until_it_is_used() -> None:
    code = (
        "import sys, pgq\n"
        "heavy = ('pgq.worker', 'pgq.metrics', 'pgq.worker.maintenance', 'pgq.listener', 'http.server', 'alembic',\n"
        "         'tenacity', 'opentelemetry', 'django', 'pgq.otel', 'pgq.contrib')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "assert pgq.Worker.__module__ == 'pgq.worker.worker' and pgq.WorkerConfig().concurrency >= 1\n"
        "print('pgq.worker' in sys.modules)\n"
        "try:\n"
        "    pgq.NoSuchThing\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True", "module 'pgq' has no attribute 'NoSuchThing'"]


def test_a_worker_without_a_metrics_port_does_not_load_http_server() -> None:
    code = (
        "import sys, pgq.worker, pgq.cli\n"
        "print('http.server' in sys.modules)\n"
        "from pgq.metrics import Metrics, MetricsServer\n"
        "server = MetricsServer(Metrics('w', queues=None, concurrency=1), '127.0.0.1', 0)\n"
        "server.start()\n"
        "print('http.server' in sys.modules, server.address[1] > 0)\n"
        "server.stop()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["False", "True True"]


def test_a_worker_and_the_cli_never_load_opentelemetry_or_django() -> None:
    # Tracing and the Django backend are optional extras: only importing pgq.otel or
    # pgq.contrib.django loads them.
    code = (
        "import sys, pgq, pgq.worker, pgq.cli, pgq.testing\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'opentelemetry', 'django', 'django_tasks'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]"]
