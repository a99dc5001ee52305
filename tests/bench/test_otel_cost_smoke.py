"""bench/otel_cost.py with a few jobs: it prints off and on for each measurement, their ratio, the
JSON summary, and drops its scratch database. (The real run is a benchmark.)"""

from __future__ import annotations

import json

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_otel_cost_script_prints_both_sides_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("otel_cost.py", pgq_server_dsn, "--jobs", "40", "--reps", "1",
                                    prefix="pgq_otel", timeout=120)
    for name in ("single enqueue", "batch enqueue", "drain"):
        assert sum(line.startswith((f"{name} off: ", f"{name} on: ")) for line in lines) == 4, lines
        assert any(line.startswith(f"{name}: off ") and "(on / off " in line for line in lines), lines
    record = json.loads(lines[-2])
    assert record["workload"] == "otel_cost" and record["jobs"] == 40
    assert record["single_ratio"] > 0 and record["batch_ratio"] > 0 and record["drain_ratio"] > 0
