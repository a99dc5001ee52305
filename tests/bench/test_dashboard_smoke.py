"""bench/dashboard.py with a few thousand jobs: it fills its scratch database, requests every route,
prints a time per route, and drops the database. (The real run, 1.1 million jobs, is a benchmark, not
a test.)"""

from __future__ import annotations

import pytest

from .scripts import run_in_scratch_database

pytest.importorskip("starlette", reason="needs the web extra: pip install 'pgq-jobs[web]'")


@pytest.mark.slow
def test_dashboard_bench_runs_every_route_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database(
        "dashboard.py", pgq_server_dsn, "--finished", "2000", "--queued", "300", "--warmup", "1", "--repeat", "2",
        prefix="pgq_dash_bench", timeout=180,
    )

    filled = next(line for line in lines if line.startswith("filled: "))
    assert "2,000 finished" in filled
    assert any(line.strip().startswith("counted the finished jobs into pgq.finished_counts") for line in lines)
    header = lines.index(next(line for line in lines if line.startswith("route")))
    rows = lines[header + 1:-2]
    assert len(rows) == 39  # 29, the queue page's five and the counts' charts and API (#44)
    assert any(r.startswith("GET / ") for r in rows) and any(r.startswith("POST /api/jobs/{id}/cancel") for r in rows)
    for row in rows:
        p50, p95, worst = (float(v) for v in row.split()[-3:])
        assert 0 < p50 <= p95 <= worst
    assert lines[-2].startswith("slowest p95: ")
