"""bench/unknown_kind_claim.py with a small backlog: the claim timings of each case for the current
pgq.claim and revision 0023's, and the worker's timings from its start; each run drops its scratch
database."""

from __future__ import annotations

import re

import pytest

from .scripts import run_in_scratch_database


@pytest.mark.slow
def test_unknown_kind_claim_script_times_each_case_and_drops_its_database(pgq_server_dsn: str) -> None:
    out = "\n".join(run_in_scratch_database("unknown_kind_claim.py", pgq_server_dsn, "--jobs", "2000", "--claims",
                                            "3", "--old", "0023", prefix="pgq_unk", timeout=300))
    rows = re.findall(r"^claim (current|0023) *, kinds plain,extra, 16 known, (ready|fresh|same|better) +"
                      r"\(2,000 jobs\): median +([\d.]+) ms, p90 +([\d.]+) ms, +([\d.]+)x ready"
                      r"(?:, +[\d.]+x fresh)?$", out, re.M)
    assert [(rev, case) for rev, case, *_ in rows] == [
        (rev, case) for rev in ("current", "0023") for case in ("ready", "fresh", "same", "better")]
    assert all(0 < float(median) <= float(p90) for _, _, median, p90, _ in rows)


@pytest.mark.slow
def test_unknown_kind_claim_script_times_a_worker_from_its_start(pgq_server_dsn: str) -> None:
    out = "\n".join(run_in_scratch_database("unknown_kind_claim.py", pgq_server_dsn, "--jobs", "2000",
                                            "--from-start", prefix="pgq_unk", timeout=300))
    assert re.search(r"^2,000 unknown jobs ahead: ping ran [\d.]+ s after the worker started$", out, re.M), out
    assert re.search(r"^2,000 unknown jobs ahead: pong ran [\d.]+ s after the worker started$", out, re.M), out
    assert "unknown rows touched: none" in out
