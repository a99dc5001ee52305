"""bench/wake_floor.py with a few jobs: it times every job, its figures are ordered as the path is
(notified before claimed), and it drops its scratch database."""

from __future__ import annotations

import json

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_wake_floor_script_times_every_job_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("wake_floor.py", pgq_server_dsn, "--jobs", "30", "--rate", "50",
                                    prefix="pgq_wake", timeout=120)
    record = json.loads(lines[1])
    assert record["workload"] == "wake_floor" and record["mode"] == "blocking" and record["jobs"] == 30
    assert record["enqueue_call_p50_ms"] > 0 and 0 < record["notified_p50_ms"] <= record["claimed_p50_ms"]
    assert record["claimed_p50_ms"] <= record["claimed_p99_ms"]


@pytest.mark.slow
def test_wake_floor_asyncio_mode_times_the_handler_thread_after_the_claim(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("wake_floor.py", pgq_server_dsn, "--jobs", "30", "--rate", "50", "--asyncio",
                                    prefix="pgq_wake", timeout=120)
    record = json.loads(lines[1])
    assert record["mode"] == "asyncio" and record["jobs"] == 30
    assert 0 < record["notified_p50_ms"] <= record["claimed_p50_ms"] <= record["handler_p50_ms"]
    assert record["handler_p50_ms"] <= record["handler_p99_ms"]
