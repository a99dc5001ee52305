"""bench/bulk_retry.py with a few thousand jobs: it retries them by filter while a worker fails them
again, prints its numbers, finds every job retried exactly once, and drops its database."""

from __future__ import annotations

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_bulk_retry_bench_retries_every_job_once_and_drops_its_database(pgq_server_dsn: str) -> None:
    lines = run_in_scratch_database("bulk_retry.py", pgq_server_dsn, "--jobs", "2500", "--others", "100",
                                    "--batch", "500", prefix="pgq_bulk_bench", timeout=180)
    assert any(line.startswith("retried 2,500 of 2,500 matched in ") for line in lines), lines
    assert any(line.startswith("longest lock wait seen: ") for line in lines)
    assert lines[-2] == "audit: 2,500 retries of 2,500 distinct jobs, 0 of other kinds: every job retried exactly once"
