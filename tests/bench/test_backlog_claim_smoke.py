"""bench/backlog_claim.py with a small backlog: it prints each case's timings for both claim sizes,
with the ratio to the claim with no limit, and drops its scratch database."""

from __future__ import annotations

import re

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_backlog_claim_script_times_each_case_and_drops_its_database(pgq_server_dsn: str) -> None:
    out = "\n".join(run_in_scratch_database("backlog_claim.py", pgq_server_dsn, "--queued", "20000",
                                            "--limited", "2000", "--claims", "3", prefix="pgq_backlog",
                                            timeout=300))

    rows = re.findall(r"^claims of (\d+), (no limit|unrelated limit|full window ahead) *: median +([\d.]+) ms, "
                      r"p90 +([\d.]+) ms, +([\d.]+)x no limit's$", out, re.M)
    assert [(size, case) for size, case, *_ in rows] == [
        (size, case) for size in ("16", "256") for case in ("no limit", "unrelated limit", "full window ahead")]
    assert all(0 < float(median) <= float(p90) for _, _, median, p90, _ in rows)
