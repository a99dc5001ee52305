"""bench/long_horizon.py for a few seconds: its private server starts with autovacuum on, a worker
drains the producer's jobs through the three phases, the pin holds back vacuum (dead row versions
only grow, in pgq.jobs and in its hot partition, pgq.live_jobs), the summary names every phase with
its latencies, rate and the hot table's and the history's figures, and `--explain` prints the plans
of a claim's statements. (The real run, 60 s, 300 s pinned and 120 s, is a benchmark: see
bench/README.md.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

import psycopg
import pytest

from .scripts import BENCH


@pytest.mark.slow
def test_long_horizon_reports_each_phase() -> None:
    result = subprocess.run([sys.executable, str(BENCH / "long_horizon.py"), "--warm", "2", "--pin", "3",
                             "--recover", "2", "--sample", "0.5", "--rate", "100", "--explain", "3"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "autovacuum on" in lines[0], lines[0]
    samples = [line.split() for line in lines
               if line.split()[:1] and line.split()[0].isdigit() and line.split()[1] in ("warm", "pinned", "recovery")]
    for column in (3, 7):  # pgq.jobs with its partitions, then the hot table alone
        pinned = [int(s[column].replace(",", "")) for s in samples if s[1] == "pinned"]
        assert len(pinned) >= 3 and pinned == sorted(pinned) and pinned[-1] > pinned[0], samples
    rows = {line.split()[1]: line.split() for line in lines if line.startswith("  HEAD:")}
    for phase in ("warm", "pinned", "recovery"):
        row = rows[phase]
        assert int(row[2].replace(",", "")) > 0, row  # jobs enqueued in the phase, finished
        p50, p95, p99 = (float(x) for x in row[3:6])
        assert 0 < p50 <= p95 <= p99, row
    assert 50 <= float(rows["pinned"][8]) <= 150, rows["pinned"]  # ~100 jobs/s went through
    # the hot table's peak of dead versions (a share of pgq.jobs'), the history's, the hot table's MB
    assert 0 < int(rows["pinned"][11].replace(",", "")) <= int(rows["pinned"][9].replace(",", "")), rows["pinned"]
    assert int(rows["pinned"][12].replace(",", "")) >= 0 and float(rows["pinned"][13]) > 0, rows["pinned"]
    assert any("the hot table's dead row versions" in line for line in lines), lines
    # the claim's statements, read through the hot table's claim index by kind
    assert any(line.startswith("  | explain at ") for line in lines), lines
    assert any("live_jobs_claim_kind_idx" in line for line in lines if line.startswith("  | ")), lines
    assert any("dead row versions" in line for line in lines), lines


def test_sample_reads_the_one_table_of_the_revisions_before_the_split(
        pgq_empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `--baseline` before revision 0033 has a plain pgq.jobs, which pg_partition_tree does not list:
    its dead row versions still count, as pgq.jobs' and as the hot table's, and no history is read."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("long_horizon", BENCH / "long_horizon.py")
    assert spec is not None and spec.loader is not None
    long_horizon = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long_horizon)
    with psycopg.connect(pgq_empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pgq")
        conn.execute("CREATE TABLE pgq.jobs (id bigint, queue text, finished_at timestamptz)")
        conn.execute("INSERT INTO pgq.jobs SELECT g, 'q', now() FROM generate_series(1, 10) g")
        conn.execute("DELETE FROM pgq.jobs WHERE id <= 4")
        conn.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(pgq_empty_dsn, autocommit=True) as conn:
            row = conn.execute(long_horizon.SAMPLE, {"q": "q"}).fetchone()
        assert row is not None
        _, finished, jobs_dead, jobs_live, live_dead, hist_dead, *_ = row
        if jobs_dead or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (finished, jobs_dead, jobs_live, live_dead, hist_dead) == (6, 4, 6, 4, 0)
