"""bench/soak.py for a few seconds: it runs workers and a producer, prints its lines, and drops its
scratch database. (The real soak, 30 minutes, is a benchmark run from `python3 dev.py soak`.)"""

from __future__ import annotations

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_soak_script_reports_steady_lines_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database(
        "soak.py", pgq_server_dsn, "--minutes", "0.15", "--report-every", "3", "--rate", "200",
        "--workers", "1", "--retention", "2", "--retention-interval", "1", prefix="pgq_soak", timeout=120,
    )
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["min", "enq/s", "done/s"])
    rows = [line.split() for line in lines[header + 1:] if line.strip()[:1].isdigit()]
    assert len(rows) >= 3, lines
    for row in rows[1:]:
        assert 100 <= float(row[1]) <= 300 and 100 <= float(row[2]) <= 300, row  # enqueued ~= done ~= 200/s
    assert "first and last interval:" in lines
