"""bench/long_horizon.py for a few seconds: its private server starts with autovacuum on, a worker
drains the producer's jobs through the three phases, the pin holds back vacuum (dead row versions
only grow), and the summary names every phase with its latencies and rate. (The real run, 60 s, 300 s
pinned and 120 s, is a benchmark: see bench/README.md.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .scripts import BENCH


@pytest.mark.slow
def test_long_horizon_reports_each_phase() -> None:
    result = subprocess.run([sys.executable, str(BENCH / "long_horizon.py"), "--warm", "2", "--pin", "3",
                             "--recover", "2", "--sample", "0.5", "--rate", "100"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "autovacuum on" in lines[0], lines[0]
    samples = [line.split() for line in lines
               if line.split()[:1] and line.split()[0].isdigit() and line.split()[1] in ("warm", "pinned", "recovery")]
    pinned = [int(s[3].replace(",", "")) for s in samples if s[1] == "pinned"]
    assert len(pinned) >= 3 and pinned == sorted(pinned) and pinned[-1] > pinned[0], samples
    rows = {line.split()[1]: line.split() for line in lines if line.startswith("  HEAD:")}
    for phase in ("warm", "pinned", "recovery"):
        row = rows[phase]
        assert int(row[2].replace(",", "")) > 0, row  # jobs enqueued in the phase, finished
        p50, p95, p99 = (float(x) for x in row[3:6])
        assert 0 < p50 <= p95 <= p99, row
    assert 50 <= float(rows["pinned"][8]) <= 150, rows["pinned"]  # ~100 jobs/s went through
    assert any("dead row versions" in line for line in lines), lines
