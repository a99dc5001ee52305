"""bench/wake_floor.py with a few jobs: it times every job, its figures are ordered as the path is
(notified before claimed), and it drops its scratch database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "wake_floor.py"


@pytest.mark.slow
def test_wake_floor_script_times_every_job_and_drops_its_database(pgq_server_dsn: str) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--dsn", pgq_server_dsn, "--jobs", "30", "--rate", "50"],
        capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    name = lines[0].split()[2]
    assert name.startswith("pgq_wake_")
    record = json.loads(lines[1])
    assert record["workload"] == "wake_floor" and record["jobs"] == 30
    assert record["enqueue_call_p50_ms"] > 0 and 0 < record["notified_p50_ms"] <= record["claimed_p50_ms"]
    assert record["claimed_p50_ms"] <= record["claimed_p99_ms"]
    assert lines[-1] == f"dropped database {name}"
    with psycopg.connect(pgq_server_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)
