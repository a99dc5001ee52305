"""bench/dashboard_ab.py on a small database, this checkout against itself: both dashboards start,
answer each route in turn, and the script prints both sides' times and their ratio. (Comparing two
checkouts on a big fill is a benchmark, not a test.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pgq import Queue

from .scripts import BENCH

pytest.importorskip("uvicorn", reason="needs the web extra: pip install 'pgq-jobs[web]'")


@pytest.mark.slow
def test_dashboard_ab_measures_both_sides_route_by_route(pgq_dsn: str, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "k", "queue": "reports"}] * 3)
    (claim,) = pgq_queue.claim(worker="w", queues=["reports"])
    pgq_queue.fail(claim, "boom", final=True)
    result = subprocess.run([sys.executable, str(BENCH / "dashboard_ab.py"), "--dsn", pgq_dsn, "--a",
                             str(BENCH.parent), "--warmup", "0", "--repeat", "2", "--only", "GET /api/queues",
                             "--only", "GET /queues/*"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["route", "A"]
    measured = {line.split("  ")[0]: line.split()[-5:] for line in lines[1:] if "skipped" not in line}
    assert "GET /api/queues" in measured and "GET /queues/reports" in measured, lines
    for values in measured.values():
        assert all(float(v) > 0 for v in values), values
