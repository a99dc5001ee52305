"""bench/churn.py with a few thousand jobs: it runs, reports start / in between / end, and drops its
scratch database. (The real run, 1,000,000 jobs, is a benchmark, not a test.)"""

from __future__ import annotations

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_churn_script_runs_reports_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database(
        "churn.py", pgq_server_dsn, "--jobs", "3000", "--report-every", "1000", "--backlog", "500",
        "--retention", "0.5", prefix="pgq_churn", timeout=120,
    )

    assert "pgq.live_jobs storage parameters" in lines[1] and "fillfactor=50" in lines[1]  # revision 0033
    rows = [line.split() for line in lines if " / " in line]  # the progress lines: latencies "p50 / p99"
    assert rows[0][0] == "start" and rows[-1][:2] == ["end", "3,000"]
    assert len(rows) >= 4  # start, 1,000, 2,000, end
    assert any("start: table" in line and "jobs_claim_idx" in line for line in lines)
