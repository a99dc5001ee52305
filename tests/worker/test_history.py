"""A randomized run under faults, checked against its whole recorded history (tests/history.py).

Worker processes drain a mix of jobs through the fault proxy while the test keeps enqueueing
deduplicated jobs with rising watermarks, cancels jobs at random, and injects faults at random: cuts
of every connection, a cut at a chosen statement (claim, acknowledgement, heartbeat, commit; before
the server gets it, while it answers, or after it committed and before the answer gets back), stalls
up to one and a half leases, and SIGKILLs of workers (restarted at once). Afterwards the history
checker verifies every job's sequence of attempts, at most one live lease per job at any time, no
completion accepted from a lease that was not current, no rescue of an unexpired lease, dedupe
(never two active jobs per key), the per-kind concurrency limit, watermarks never going backwards,
and side effects; every job not cancelled must have succeeded.

CI runs a short version (PGQ_HISTORY_JOBS, default 6,000 jobs); `python3 dev.py history` runs the
full one (100,000 jobs). PGQ_HISTORY_SEED replays a run's random choices (the faults' timing does
not replay exactly).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

import pgq

from .. import history
from .conftest import WorkerProcess
from .faults import CLAIM, COMPLETE, HEARTBEAT, LEASE_S, Faults, report

pytestmark = [pytest.mark.slow, pytest.mark.faults]

WORKERS = 3
KEYS = 40  # dedupe keys of the keyed jobs
LIMIT = 3  # concurrency limit of kind "limited" (so every claim takes the general, two-statement path)


def test_random_history_under_faults_and_kills_holds_every_invariant(
    faults: Faults, capsys: pytest.CaptureFixture[str]
) -> None:
    total = int(os.environ.get("PGQ_HISTORY_JOBS", "6000"))
    seed = int(os.environ.get("PGQ_HISTORY_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    plain = int(total * 0.8)
    limited = int(total * 0.05)
    keyed_rounds = total - plain - limited  # keyed enqueues: deduplicated, so fewer jobs than calls
    with pgq.Queue(faults.direct_dsn) as queue:
        for start in range(0, plain, 5000):
            queue.enqueue_many([pgq.JobSpec("chaos", {"n": n, "ms": rng.choice((1, 2, 5, 20)), "rerun_ms": 2},
                                            queue="work") for n in range(start, min(plain, start + 5000))])
        queue.enqueue_many([pgq.JobSpec("limited", {"n": n, "ms": 5, "rerun_ms": 5}, queue="work")
                            for n in range(limited)])
        queue.set_concurrency_limit("limited", LIMIT)

    generations = Counter[int]()

    def spawn(slot: int) -> WorkerProcess:
        generations[slot] += 1
        return faults.worker(f"h{slot}-{generations[slot]}")

    workers = [spawn(slot) for slot in range(WORKERS)]
    injected = Counter[str]()
    cancelled: set[int] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def keyed_producer() -> None:
        # Enqueue keyed jobs with rising watermarks while the run goes on: most calls land on a job
        # of the same key that is still active and only raise its input watermark.
        try:
            with pgq.Queue(faults.direct_dsn) as producer:
                for i in range(keyed_rounds):
                    if stop.is_set():
                        return
                    key = f"k{i % KEYS}"
                    producer.enqueue("chaos", {"n": -1 - i % KEYS, "ms": 2, "rerun_ms": 2}, queue="work",
                                     dedupe_key=key, watermark=i + 1)
                    time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)

    keyed = threading.Thread(target=keyed_producer, name="keyed-producer", daemon=True)
    keyed.start()
    started = time.monotonic()
    deadline = started + max(180.0, total / 100)
    # Every kind of fault once, early and in a random order, then at random: a run that drains fast
    # (a quiet machine) still meets each of them.
    first = rng.sample(("cut", "arm", "stall", "kill", "cancel"), 5)
    with pgq.Queue(faults.direct_dsn) as operator:
        while True:
            counts = faults.db.status_counts()
            if not keyed.is_alive() and counts.get("queued", 0) == 0 and counts.get("running", 0) == 0:
                break
            assert time.monotonic() < deadline, f"run (seed {seed}) not done: {counts}, faults {dict(injected)}"
            time.sleep(rng.uniform(0.3, 1.0))
            fault = first.pop() if first else rng.choice(("cut", "arm", "arm", "stall", "kill", "kill", "cancel"))
            if fault == "cut":
                faults.proxy.cut()
            elif fault == "arm":
                # COMMIT ends the general claim's transaction (and maintenance's): "after" it, the
                # claimed rows are committed and lost in transit.
                marker = rng.choice((CLAIM, COMPLETE, HEARTBEAT, "COMMIT"))
                phase = rng.choice(("before", "during", "after"))
                armed = faults.proxy.arm(marker, phase)
                if not armed.event.wait(3):
                    faults.proxy.disarm(armed)
                    continue
                fault = f"cut {marker.removeprefix('-- ').rstrip(':')} {phase}"
            elif fault == "stall":
                faults.proxy.stall()
                time.sleep(rng.uniform(0.2, 1.5 * LEASE_S))
                faults.proxy.resume()
            elif fault == "kill":
                slot = rng.randrange(WORKERS)
                workers[slot].signal(signal.SIGKILL)
                workers[slot].proc.wait(10)
                workers[slot] = spawn(slot)
            else:
                rows = faults.db.rows("SELECT id FROM pgq.jobs WHERE status IN ('queued', 'running') "
                                      "AND kind = 'chaos' ORDER BY random() LIMIT 3")
                for row in rows:
                    try:
                        operator.cancel(row["id"])
                    except pgq.InvalidState:
                        continue  # it finished meanwhile
                    cancelled.add(row["id"])
            injected[fault] += 1
    stop.set()
    keyed.join(10)
    assert not errors, errors
    elapsed = time.monotonic() - started
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        w.wait(30)

    checked = history.check(faults.db.conn)
    finals = {r["status"]: r["n"] for r in faults.db.rows(
        "SELECT status::text AS status, count(*) AS n FROM pgq.jobs GROUP BY 1")}
    wrong = faults.db.rows("SELECT id, status::text AS status, last_error FROM pgq.jobs "
                           "WHERE status <> 'succeeded' AND NOT (id = ANY(%s) AND status = 'cancelled') LIMIT 5",
                           (list(cancelled),))
    keyed_jobs = faults.db.value("SELECT count(*) FROM pgq.jobs WHERE dedupe_key IS NOT NULL")
    stale = sum(w.log().count("refused: lease lost") for w in workers)
    summary = (f"history run (seed {seed}): {total} enqueues ({plain} plain, {limited} limited to {LIMIT}, "
               f"{keyed_rounds} keyed on {KEYS} keys -> {keyed_jobs} keyed jobs), {WORKERS} workers, "
               f"{elapsed:.0f} s; faults {dict(sorted(injected.items()))}; final {finals}; "
               f"{stale} late acknowledgements refused in the logs; checked: {checked.summary()}")
    report(capsys, summary)
    assert not checked.violations, f"{summary}\nviolations: {checked.violations}"
    assert not wrong, f"{summary}\njobs that should have succeeded: {wrong}"
    assert injected["kill"] and injected["cut"] + injected["stall"] > 0, summary


def test_the_checker_finds_planted_violations(faults: Faults) -> None:
    # The checker must not be vacuous: plant each kind of violation by hand and see it reported.
    db = faults.db
    with pgq.Queue(faults.direct_dsn) as queue:
        a, b = queue.enqueue_many([pgq.JobSpec("chaos", {"n": 1}, queue="work"),
                                   pgq.JobSpec("chaos", {"n": 2}, queue="work")])
        claims = queue.claim(worker="planter", queues=["work"], limit=2, lease=60)
        assert {c.id for c in claims} == {a, b}
        queue.set_concurrency_limit("limited", 1)
    db.rows("ALTER TABLE pgq.jobs DISABLE TRIGGER USER")  # pgq's own triggers too: plain row edits
    for trigger in ("history_insert", "history_update", "history_delete"):  # a finish moves the row (0033)
        db.rows(f"ALTER TABLE pgq.jobs ENABLE TRIGGER {trigger}")
    # a stale completion: succeeded with a result naming another token
    db.rows("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now(), lease_token = NULL, "
            "lease_expires_at = NULL, result = jsonb_build_object('token', gen_random_uuid()) WHERE id = %s", (a,))
    # a finished job changed again, and a claim while running (a second live lease)
    db.rows("UPDATE pgq.jobs SET status = 'queued', finished_at = NULL WHERE id = %s", (a,))
    db.rows("UPDATE pgq.jobs SET lease_token = gen_random_uuid(), attempts = attempts + 1 WHERE id = %s", (b,))
    # a rescue before the lease expired
    db.rows("UPDATE pgq.jobs SET status = 'queued', lease_token = NULL, lease_expires_at = NULL, "
            "last_error = 'lease expired at x (attempt ' || attempts || ', worker w)' WHERE id = %s", (b,))
    # a limited kind over its limit
    db.rows("ALTER TABLE pgq.jobs DISABLE TRIGGER history_insert")  # rows inserted unrecorded
    db.rows("INSERT INTO pgq.jobs (kind, queue, status, attempts, lease_token, lease_expires_at) "
            "SELECT 'limited', 'work', 'queued', 0, NULL, NULL FROM generate_series(1, 2)")
    db.rows("ALTER TABLE pgq.jobs ENABLE TRIGGER history_insert")
    db.rows("UPDATE pgq.jobs SET status = 'running', attempts = 1, lease_token = gen_random_uuid(), "
            "lease_expires_at = now() + interval '1 minute' WHERE kind = 'limited'")
    # a watermark going backwards
    db.rows("INSERT INTO pgq.key_watermarks (queue, dedupe_key, done_watermark, job_id) VALUES ('work', 'k', 5, %s)",
            (a,))
    db.rows("UPDATE pgq.key_watermarks SET done_watermark = 3 WHERE dedupe_key = 'k'")
    db.rows("ALTER TABLE pgq.jobs ENABLE TRIGGER USER")
    found = set(history.check(db.conn, effects=False).violations)
    expected = {
        "a completion was accepted from an attempt that did not hold the lease",
        "a finished job was changed again",
        "a job was claimed while running (two live leases)",
        "a rescue took a lease before it expired (database clock)",
        "a concurrency limit was exceeded",
        "a key's done watermark went backwards",
        "a job's history does not start with its enqueue",  # the hand-inserted rows bypassed the insert trigger
    }
    assert expected <= found, f"not reported: {expected - found}; reported: {found}"

