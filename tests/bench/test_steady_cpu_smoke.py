"""bench/steady_cpu.py on a short drain: it runs the worker, and prints its one line of figures once the
window has passed. (Its numbers are a benchmark's, not a test's: only their shape is checked.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pgq

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "steady_cpu.py"

APP = """
import os

import pgq

app = pgq.App(os.environ["STEADY_SMOKE_DSN"])


@app.task(queue="steady")
def noop(i: int) -> None:
    pass
"""


@pytest.mark.slow
def test_steady_cpu_prints_rate_and_cpu_per_job_of_a_busy_worker(pgq_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "steady_app.py").write_text(APP)
    with pgq.Queue(pgq_dsn) as queue:
        queue.enqueue_many([pgq.JobSpec("noop", {"i": i}, queue="steady") for i in range(20_000)])
    err = tmp_path / "stderr.txt"
    with open(err, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "worker", "steady_app:app", "--queue", "steady", "--concurrency", "8",
             "--dsn", pgq_dsn, "--window", "0.3"],
            cwd=tmp_path, env={**os.environ, "STEADY_SMOKE_DSN": pgq_dsn},
            stdout=subprocess.DEVNULL, stderr=sink,
        )
        try:
            deadline = time.monotonic() + 60
            while "steady_cpu:" not in err.read_text() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    [line] = [x for x in err.read_text().splitlines() if x.startswith("steady_cpu:")]
    match = re.fullmatch(r"steady_cpu: [\d.]+ s, (\d+) jobs \((\d+)/s\): main thread ([\d.]+) us/job "
                         r"\((\d+)% busy\), other threads ([\d.]+) us/job", line)
    assert match, line
    assert int(match[1]) > 0 and int(match[2]) > 0 and float(match[3]) > 0
    assert proc.returncode == 0
