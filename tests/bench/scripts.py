"""Running a benchmark script of bench/ that works in a scratch database of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_in_scratch_database(script: str, dsn: str, *args: str, prefix: str, timeout: float) -> list[str]:
    """Run `bench/<script>` with `--dsn dsn` and `args`; check that it exited 0, announced a scratch
    database `<prefix>_...` on its first line, said on its last that it dropped it, and that the
    database is gone from the server. Returns the lines it printed on stdout."""
    result = subprocess.run([sys.executable, str(BENCH / script), "--dsn", dsn, *args],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    name = lines[0].split()[2]
    assert name.startswith(f"{prefix}_"), lines[0]
    assert lines[-1] == f"dropped database {name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)
    return lines
