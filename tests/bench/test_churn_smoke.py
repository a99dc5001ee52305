"""bench/churn.py with a few thousand jobs: it runs, reports start / in between / end, and drops its
scratch database. (The real run, 1,000,000 jobs, is a benchmark, not a test.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "churn.py"


@pytest.mark.slow
def test_churn_script_runs_reports_and_drops_its_database(pgq_server_dsn: str) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--dsn", pgq_server_dsn, "--jobs", "3000", "--report-every", "1000",
         "--backlog", "500", "--retention", "0.5"],
        capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    name = lines[0].split()[2]
    assert name.startswith("pgq_churn_")
    assert "fillfactor=90" in lines[1]
    rows = [line.split() for line in lines if " / " in line]  # the progress lines: latencies "p50 / p99"
    assert rows[0][0] == "start" and rows[-1][:2] == ["end", "3,000"]
    assert len(rows) >= 4  # start, 1,000, 2,000, end
    assert any("start: table" in line and "jobs_claim_idx" in line for line in lines)
    assert lines[-1] == f"dropped database {name}"
    with psycopg.connect(pgq_server_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)
