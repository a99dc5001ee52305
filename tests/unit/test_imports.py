"""`import pgq` loads what a producer needs and no more; the worker loads on first use."""

from __future__ import annotations

import subprocess
import sys


def test_import_pgq_leaves_the_worker_unloaded_until_it_is_used() -> None:
    code = (
        "import sys, pgq\n"
        "heavy = ('pgq.worker', 'pgq.metrics', 'pgq.maintenance', 'pgq.listener', 'http.server', 'alembic')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "assert pgq.Worker.__module__ == 'pgq.worker' and pgq.WorkerConfig().concurrency >= 1\n"
        "print('pgq.worker' in sys.modules)\n"
        "try:\n"
        "    pgq.NoSuchThing\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True", "module 'pgq' has no attribute 'NoSuchThing'"]
