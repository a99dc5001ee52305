"""bench/json_bounds.py with a few jobs: it prints off and on for each shape, what the check adds,
the JSON summary, and drops its scratch database. (The real run is a benchmark.)"""

from __future__ import annotations

import json

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_json_bounds_script_prints_both_sides_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("json_bounds.py", pgq_server_dsn, "--reps", "1", "--scale", "0.01",
                                    prefix="pgq_jsonb", timeout=120)
    for name in ("small", "nested", "wide", "small rows"):
        assert sum(line.startswith((f"{name} off: ", f"{name} on: ")) for line in lines) == 4, lines
        assert any(line.startswith(f"{name}: off ") and "the check adds" in line for line in lines), lines
    record = json.loads(lines[-2])
    assert record["workload"] == "json_bounds" and record["small"]["jobs"] == 200
