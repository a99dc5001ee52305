"""bench/workflows.py with a tiny graph: it runs a plain and a DAG drain, prints both rates and the JSON
summary, and drops its scratch database. (The real run, 10 wide and 100 deep, is a benchmark.)"""

from __future__ import annotations

import json

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_workflows_script_prints_dag_and_plain_rates_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("workflows.py", pgq_server_dsn, "--width", "3", "--depth", "5", "--reps", "1",
                                    "--concurrency", "4", prefix="pgq_workflows", timeout=120)
    runs = [line for line in lines if line.startswith(("plain 15 jobs: ", "DAG 3 wide x 5 deep, 2-3 parents: "))]
    assert len(runs) == 2 and "ms per level" in runs[1], lines
    record = json.loads(lines[-2])
    assert {k: record[k] for k in ("workload", "width", "depth", "parents", "workers", "reps")} == {
        "workload": "workflows", "width": 3, "depth": 5, "parents": [2, 3], "workers": 1, "reps": 1}
    assert record["plain_jobs_per_s"] > 0 and record["dag_jobs_per_s"] > 0 and record["dag_ms_per_level"] > 0
