"""The README's two lines that make an in-process worker log: run as written, they show its start
and stop on stderr, where without them it prints nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"

WORKER = """
import os
import pgq
app = pgq.App(os.environ["PGQ_TEST_APP_DSN"])
worker = pgq.Worker(app, lease=5, poll_interval=0.5)
worker.stop()  # asked before it runs: it starts, then drains at once
worker.run()
"""


def readme_logging_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    found = [b for b in blocks if "logging.basicConfig" in b]
    assert len(found) == 1, "README.md should show the logging set-up for in-process workers once"
    return found[0]


def run_python(code: str, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env={"PGQ_TEST_APP_DSN": dsn, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=True)


def test_readme_logging_lines_make_an_in_process_worker_log_its_start_and_stop(pgq_dsn: str) -> None:
    block = readme_logging_block()
    assert len([line for line in block.splitlines() if line.strip()]) == 2
    silent = run_python(WORKER, pgq_dsn)
    assert "started" not in silent.stderr  # the trap the README warns about
    logged = run_python(block + WORKER, pgq_dsn)
    assert re.search(r"INFO pgq\.worker: worker \S+ started: queues", logged.stderr), logged.stderr
    assert re.search(r"INFO pgq\.worker: worker \S+ stopped:", logged.stderr), logged.stderr
