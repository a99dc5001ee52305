"""Network faults between workers and PostgreSQL, injected by a TCP proxy (tests/faultproxy.py).

Each scenario runs real worker processes (tests/worker/runner.py) through the proxy on thousands of
jobs, while the handlers record their side effects over a direct connection (PGQ_TEST_EFFECTS_DSN),
so a fault can neither hide nor repeat a record. The database records every job event in `history`
(tests/history.py); afterwards every job must have succeeded, once in effect, with the whole
history valid (no completion from a stale lease, no two live leases, ...), and the workers must have
recovered within a stated bound after the fault ended. Recovery times are measured on the database
clock and printed.

Faults:
- a connection cut just before a claim / acknowledgement / heartbeat reaches the server, while the
  server sends its answer, and once the server ran it and committed, before its answer reached the
  worker (claimed rows lost in transit, an acknowledgement applied but not confirmed), plus cuts of
  every connection at once;
- a stall of every byte for three leases while handlers run (the worker must stop its handlers before
  another takes their jobs over, and come back afterwards);
- the LISTEN connection black-holed (wake-ups fall back to polling within the poll interval; the
  listener notices by its ping and reconnects once the network heals);
- PostgreSQL unreachable when the worker starts (logged retries with backoff, no crash);
- PostgreSQL gone for 30 s in the middle of a run (PGQ_FAULT_OUTAGE_S to change it).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

import pgq

from .conftest import wait_for
from .faults import CLAIM, COMPLETE, HEARTBEAT, HEARTBEAT_S, IO_TIMEOUT_S, LEASE_S, POLL_S, Faults, report

pytestmark = [pytest.mark.slow, pytest.mark.faults]

def test_cuts_at_claims_acknowledgements_and_heartbeats_lose_nothing(
    faults: Faults, capsys: pytest.CaptureFixture[str]
) -> None:
    total = 6000
    rng = random.Random(int(os.environ.get("PGQ_FAULT_SEED", random.randrange(1 << 30))))
    faults.enqueue_chaos(total, ms=30)
    workers = [faults.worker(f"cut-{i}") for i in range(2)]
    kinds = [(m, p) for m in (CLAIM, COMPLETE, HEARTBEAT) for p in ("before", "during", "after")]
    rng.shuffle(kinds)
    # Every kind once first, then again in another order; after every fourth, a cut of every
    # connection at once (None), added between them rather than in place of one, so that each
    # planned kind gets its turn in the first round.
    plan: list[tuple[str, str] | None] = []
    for i, kind in enumerate(kinds + rng.sample(kinds, len(kinds))):
        plan += [kind, None] if i % 4 == 3 else [kind]
    fired = Counter[str]()
    recoveries: list[float] = []
    started = time.monotonic()
    for step in plan:
        if faults.succeeded() > total * 0.9:
            break
        before = faults.succeeded()
        if step is None:
            faults.proxy.cut()  # every connection at once, whatever it was doing
            fired["all connections"] += 1
        elif faults.proxy.arm(*step).event.wait(10):
            fired[f"{step[0][3:].rstrip(':')} {step[1]}"] += 1
        cut_at = time.monotonic()
        wait_for(lambda b=before: faults.succeeded() >= b + 100 or faults.succeeded() == total, 30,
                 "progress after a cut")
        recoveries.append(time.monotonic() - cut_at)
        time.sleep(rng.uniform(0.05, 0.3))
    faults.wait_all_succeeded(total, 120, "every job to succeed after the cuts")
    elapsed = time.monotonic() - started
    for w in workers:
        assert w.alive(), w.log()[-3000:]
    checked = faults.check_history()
    logs = "".join(w.log() for w in workers)
    report(capsys, f"cuts: {total} jobs in {elapsed:.1f} s, faults {dict(fired)}; 100 more jobs done within "
           f"p50 {statistics.median(recoveries):.2f} s, max {max(recoveries):.2f} s of a cut; history: "
           f"{checked.summary()}; 'not applied' acknowledgements {logs.count('not applied')}")
    for needed in ("job_claim before", "job_claim after", "job_complete before", "job_complete after"):
        assert needed in fired, f"fault {needed} never fired: {fired}"
    assert checked.counts.get("rescues", 0) > 0, "no claim was lost in transit: the 'after' cuts proved little"
    assert max(recoveries) < 15, recoveries


def test_a_stall_longer_than_the_lease_fences_the_stalled_worker(
    faults: Faults, capsys: pytest.CaptureFixture[str]
) -> None:
    with pgq.Queue(faults.direct_dsn) as queue:
        long_ids = queue.enqueue_many([pgq.JobSpec("stoppable_sync", {"n": n, "seconds": 4.0}, queue="work",
                                                   priority=-1) for n in range(8)])
    stalled = faults.worker("stalled", concurrency=8)
    wait_for(lambda: faults.db.value("SELECT count(*) FROM effects WHERE note = 'started'") >= 4, 20,
             "the stalled worker to run the long jobs")
    faults.enqueue_chaos(2000, ms=5)
    rescuer = faults.worker("rescuer", through_proxy=False)
    faults.proxy.stall()
    stalled_at = faults.now()
    time.sleep(3 * LEASE_S)
    faults.proxy.resume()
    resumed_at = faults.now()
    faults.enqueue_chaos(2000, ms=5, start=2000)
    faults.wait_all_succeeded(2000 + 2000 + len(long_ids), 90, "every job to succeed after the stall")
    recovery = wait_for(lambda: faults.first_claim_after("stalled", resumed_at), 30,
                        "the stalled worker to claim again")
    # Each long job the stalled worker held: its handler stopped (cancel_requested) before, or at
    # most one heartbeat interval after, the next attempt started elsewhere.
    overlaps = faults.db.rows("""
        SELECT i.job_id, extract(epoch FROM i.at - s.at)::float8 AS overlap
        FROM effects i JOIN effects s ON s.job_id = i.job_id AND s.note = 'started' AND s.token <> i.token
        WHERE i.note = 'interrupted' AND s.at > %s""", (stalled_at,))
    assert overlaps, "no long job was taken over from the stalled worker"
    worst = max(r["overlap"] for r in overlaps)
    checked = faults.check_history()
    log = stalled.log()
    report(capsys, f"stall: {3 * LEASE_S:g} s (lease {LEASE_S:g} s) with {len(overlaps)} long jobs taken over; "
           f"worst handler overlap {worst:+.2f} s (negative: stopped before the rescue); the stalled worker "
           f"claimed again {recovery:.2f} s after the network healed; refused late acknowledgements "
           f"{log.count('refused: lease lost')}; history: {checked.summary()}")
    assert worst <= HEARTBEAT_S, overlaps
    assert recovery < IO_TIMEOUT_S + 10
    assert stalled.alive() and rescuer.alive()


def test_a_black_holed_listen_connection_falls_back_to_polling(
    faults: Faults, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = faults.worker("deaf", through_proxy=False, listen_dsn=faults.proxied_dsn)
    with pgq.Queue(faults.direct_dsn) as queue:

        def latencies(count: int, gap: float) -> list[float]:
            ids = []
            for n in range(count):
                ids.append(queue.enqueue("record", {"n": n}, queue="work"))
                time.sleep(gap)
            wait_for(lambda: faults.db.value("SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s) "
                                             "AND status = 'succeeded'", (ids,)) == count, 30, "the jobs")
            return [r["s"] for r in faults.db.rows(
                "SELECT extract(epoch FROM c.at - e.at)::float8 AS s FROM history e "
                "JOIN history c ON c.job_id = e.job_id AND c.event = 'claim' "
                "WHERE e.event = 'enqueue' AND e.job_id = ANY(%s)", (ids,))]

        wait_for(lambda: "listening" in worker.log() or faults.proxy.connections > 0, 10, "the LISTEN connection")
        time.sleep(1.0)
        healthy = latencies(10, 0.1)
        faults.proxy.blackhole()
        deaf = latencies(20, 0.15)
        bulk = queue.enqueue_many([pgq.JobSpec("record", {"n": n}, queue="work") for n in range(3000)])
        faults.wait_all_succeeded(30 + len(bulk), 60, "a bulk of jobs to drain by polling")
        time.sleep(2 * IO_TIMEOUT_S)  # the listener's ping goes unanswered: it reconnects (into the hole)
        faults.proxy.resume()
        healed_at = time.monotonic()
        recovered: float | None = None
        while time.monotonic() - healed_at < 40:
            if max(latencies(3, 0.05)) < 0.1:
                recovered = time.monotonic() - healed_at
                break
            time.sleep(0.2)
    faults.check_history()
    report(capsys, f"black-holed LISTEN: wake-up p50/max {statistics.median(healthy) * 1000:.0f}/"
           f"{max(healthy) * 1000:.0f} ms healthy, {statistics.median(deaf) * 1000:.0f}/{max(deaf) * 1000:.0f} ms "
           f"by polling (poll interval {POLL_S:g} s); 3,000 jobs drained meanwhile; NOTIFY wake-ups back "
           f"{recovered if recovered is None else round(recovered, 1)} s after the network healed")
    assert max(deaf) <= POLL_S * 1.2 + 0.3, deaf
    assert recovered is not None, worker.log()[-3000:]
    assert "LISTEN connection lost" in worker.log()


def test_a_worker_started_while_postgres_is_unreachable_waits_and_recovers(
    faults: Faults, capsys: pytest.CaptureFixture[str]
) -> None:
    faults.proxy.refuse()
    worker = faults.worker("early")
    time.sleep(6)
    assert worker.alive(), worker.log()
    retries = [line for line in worker.log().splitlines() if "database unavailable during" in line]
    faults.enqueue_chaos(2000, ms=1)
    faults.proxy.resume()
    healed_at = faults.now()
    faults.wait_all_succeeded(2000, 60, "the jobs after PostgreSQL came back")
    recovery = faults.first_claim_after("early", healed_at)
    checked = faults.check_history()
    report(capsys, f"unreachable at start: 6 s refused, {len(retries)} warnings logged meanwhile "
           f"(first: {retries[0].split(' WARNING ')[-1] if retries else None}); first claim {recovery:.2f} s "
           f"after PostgreSQL came back; history: {checked.summary()}")
    assert 1 <= len(retries) <= 12, retries  # logged, with backoff: not one line per attempt at 10/s
    assert recovery is not None and recovery < 10


def test_pgq_worker_command_waits_for_an_unreachable_database(
    faults: Faults, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    faults.proxy.refuse()
    log = tmp_path / "cli-worker.log"
    env = dict(os.environ, PGQ_TEST_WORKER_DSN=faults.proxied_dsn, PGQ_TEST_EFFECTS_DSN=faults.direct_dsn,
               PYTHONPATH=str(Path(__file__).parent))
    env.pop("PGQ_DSN", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pgq", "worker", "worker_app:app", "--queue", "work",
                                 "--lease", str(LEASE_S)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        time.sleep(4)
        assert proc.poll() is None, log.read_text()
        waits = [line for line in log.read_text().splitlines() if "waiting for the database: cannot connect" in line]
        faults.enqueue_chaos(500, ms=1)
        faults.proxy.resume()
        faults.wait_all_succeeded(500, 60, "the CLI worker to start once the database answers")
    finally:
        proc.terminate()
        proc.wait(20)
    report(capsys, f"`pgq worker` with the database unreachable: {len(waits)} retries logged in 4 s, e.g. "
           f"{waits[0].split('WARNING')[-1].strip() if waits else None!r}; exit {proc.returncode} on SIGTERM")
    assert 1 <= len(waits) <= 8, waits
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_postgres_gone_for_30_seconds_mid_run(faults: Faults, capsys: pytest.CaptureFixture[str]) -> None:
    outage = float(os.environ.get("PGQ_FAULT_OUTAGE_S", "30"))
    total = 4000
    faults.enqueue_chaos(total, ms=10)
    workers = [faults.worker(f"outage-{i}") for i in range(2)]
    wait_for(lambda: faults.succeeded() >= total * 0.3, 60, "a third of the jobs")
    faults.proxy.refuse()
    faults.proxy.cut()
    time.sleep(outage)
    for w in workers:
        assert w.alive(), w.log()[-3000:]
    faults.proxy.resume()
    healed_at = faults.now()
    faults.wait_all_succeeded(total, 90, "every job after the outage")
    recoveries: list[float] = []
    for i, worker in enumerate(workers):
        recovery = faults.first_claim_after(f"outage-{i}", healed_at)
        if recovery is not None:
            recoveries.append(recovery)
        else:  # the other worker drained what was left before this one claimed: it must be back all the same
            wait_for(lambda w=worker: "database reachable again" in w.log(), 30, f"worker outage-{i} to reconnect")
    assert recoveries, "no worker claimed after the outage"
    checked = faults.check_history()
    warnings = sum(w.log().count("database unavailable during") for w in workers)
    report(capsys, f"outage: PostgreSQL unreachable for {outage:g} s mid-run (connections cut, new ones "
           f"refused): workers claimed again {', '.join(f'{r:.2f}' for r in recoveries)} s after it came back; "
           f"{warnings} 'database unavailable' warnings in all; history: {checked.summary()}")
    assert max(recoveries) < 10
    for w in workers:
        assert w.alive(), w.log()[-3000:]


def test_a_black_holed_connection_fails_within_io_timeout(faults: Faults) -> None:
    with pgq.Queue(faults.proxied_dsn, io_timeout=1.0, timeout=3.0) as queue:
        queue.stats()
        faults.proxy.blackhole()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            queue.enqueue("record", {"n": 1}, queue="work")  # not retry-safe: fails at once
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            queue.stats()  # retry-safe: retried on new connections, each severed or timed out
        assert time.monotonic() - started < 60
