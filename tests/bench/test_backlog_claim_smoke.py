"""bench/backlog_claim.py with a small backlog: it prints the server's JIT settings, an estimate and
both variants' timings for each of its four cases, and drops its scratch database."""

from __future__ import annotations

import re

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_backlog_claim_script_times_both_variants_of_each_case_and_drops_its_database(pgq_server_dsn: str) -> None:
    out = "\n".join(run_in_scratch_database("backlog_claim.py", pgq_server_dsn, "--queued", "20000", "--claims", "3",
                                            prefix="pgq_backlog", timeout=300))

    assert "server JIT available:" in out
    cases = re.findall(r"^(all queues|one queue), claims of (\d+): estimated cost [\d,]+$", out, re.M)
    assert cases == [("all queues", "16"), ("all queues", "512"), ("one queue", "16"), ("one queue", "512")]
    timings = re.findall(r"^  (pgq|server JIT settings) +ms per claim: median +([\d.]+), p90 +([\d.]+)$", out, re.M)
    assert [t[0] for t in timings] == ["pgq", "server JIT settings"] * 4
    assert all(0 < float(median) <= float(p90) for _, median, p90 in timings)
