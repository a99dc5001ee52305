"""Follow-up jobs (`pgq.after_success`, `on_success`, `on_failure`) and dependencies with real worker
processes: killed at chosen points of the completion, losing their lease, cancelled, retried; and
children enqueued while their parents complete.

The handler `with_follow_ups` (tests/worker/worker_app.py) asks for three follow-ups of kind
`follow_up` in queue `follow`, which no test worker serves, so they stay queued to be counted: two
plain ones (`i` 1 and 2) and one with dedupe key `fu:<n>`. A follow-up is inserted by the transaction
that completes its parent, so its `created_at` (that transaction's start) equals the parent's
`finished_at`: the tests check that too.

The worker is SIGKILLed at three points of the completion (with the fault proxy of
tests/faultproxy.py where a connection must be cut at the acknowledgement's COMMIT, then every
connection stalled so that the worker can do nothing more before it dies):
- the handler returned, its acknowledgement not sent yet (a 30 s `ack_delay` holds it);
- the acknowledgement's transaction ran, its COMMIT dropped on the way (rolled back);
- the COMMIT went through, its answer lost on the way back (the worker never learns it committed).
The last two are also run without the kill: the worker sends the acknowledgement again.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgq

from .. import history
from .conftest import DB, WorkerProcess, wait_for
from .faults import COMPLETE, Faults

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]


def follow_ups(db: DB, parent: int) -> list[dict[str, Any]]:
    """The follow-up jobs of `parent`, in the order its handler asked for them."""
    return db.rows("SELECT id, payload, queue, priority, dedupe_key, status::text AS status, created_at "
                   "FROM pgq.jobs WHERE kind = 'follow_up' AND (payload->>'parent')::bigint = %s ORDER BY id",
                   (parent,))


def assert_follow_ups_once(db: DB, parent: int, n: int) -> None:
    """`parent` succeeded and has exactly its three follow-ups, inserted by its completion."""
    job = db.rows("SELECT status::text AS status, finished_at FROM pgq.jobs WHERE id = %s", (parent,))[0]
    assert job["status"] == "succeeded"
    rows = follow_ups(db, parent)
    assert [(r["payload"], r["queue"], r["priority"], r["dedupe_key"], r["status"]) for r in rows] == [
        ({"parent": parent, "i": 1}, "follow", 0, None, "queued"),
        ({"parent": parent, "i": 2}, "follow", 5, None, "queued"),
        ({"parent": parent, "keyed": True}, "follow", 0, f"fu:{n}", "queued"),
    ]
    assert {r["created_at"] for r in rows} == {job["finished_at"]}, "not inserted by the completing transaction"


def effects_of(db: DB, job_id: int, note: str) -> list[dict[str, Any]]:
    """The `effects` rows of `job_id` with `note`, oldest first."""
    return db.rows("SELECT attempt, token, pid FROM effects WHERE job_id = %s AND note = %s ORDER BY id",
                   (job_id, note))


SCENARIOS = {
    # name: (how the completion is hit, whether the worker is then killed, whether the completion committed)
    "killed after the handler returned, before the acknowledgement": ("ack_delay", True, False),
    "killed with the COMMIT lost on the way": ("before", True, False),
    "killed after the COMMIT, its answer lost": ("after", True, True),
    "survives a lost COMMIT and sends it again": ("before", False, True),
    "survives a lost answer to its COMMIT and sends it again": ("after", False, True),
}


@pytest.mark.faults
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_follow_ups_exist_once_iff_the_completion_committed(
    faults: Faults, pgq_queue: pgq.Queue, scenario: str
) -> None:
    how, kill, committed = SCENARIOS[scenario]
    db = faults.db
    job_id = pgq_queue.enqueue("with_follow_ups", {"n": 1}, queue="work")
    if how == "ack_delay":
        worker = faults.worker("victim", "--ack-delay", "30", "--log-level", "DEBUG", through_proxy=False,
                               concurrency=1)
        wait_for(lambda: re.search(rf"job {job_id} with_follow_ups attempt 1/\d+: succeeded", worker.log()), 20,
                 "the handler to return")
    else:
        armed = faults.proxy.arm(COMPLETE, how, at_commit=True, then_stall=kill)
        worker = faults.worker("victim", concurrency=1)
        assert armed.event.wait(20), f"the completion's COMMIT never came; worker log:\n{worker.log()[-3000:]}"
        assert armed.statements == ["COMMIT"]
    assert len(effects_of(db, job_id, "effect")) == 1  # the handler ran to its end once
    if not kill:
        wait_for(lambda: db.value("SELECT status::text FROM pgq.jobs WHERE id = %s", (job_id,)) == "succeeded",
                 20, "the worker to send its acknowledgement again")
        assert_follow_ups_once(db, job_id, 1)
        time.sleep(0.5)  # a second resend, were there one, lands within this
        assert worker.alive()
        if how == "after":
            assert "not applied" in worker.log()  # its second try found the job finished: nothing twice
    else:
        worker.signal(signal.SIGKILL)
        worker.wait(10)
        faults.proxy.cut()  # whatever the stalled connections hold never reaches the server
        faults.proxy.resume()
        job = db.rows("SELECT status::text AS status, attempts FROM pgq.jobs WHERE id = %s", (job_id,))[0]
        if committed:
            assert job == {"status": "succeeded", "attempts": 1}
            assert_follow_ups_once(db, job_id, 1)
        else:
            assert job == {"status": "running", "attempts": 1}
            assert follow_ups(db, job_id) == []
            # The job is rescued once its lease expires and runs again; that completion enqueues them.
            faults.worker("rescuer", through_proxy=False)
            wait_for(lambda: db.value("SELECT status::text FROM pgq.jobs WHERE id = %s", (job_id,)) == "succeeded",
                     30, "the rescued job to succeed")
            assert [r["attempt"] for r in effects_of(db, job_id, "effect")] == [1, 2]
            assert_follow_ups_once(db, job_id, 1)
    assert db.value("SELECT count(*) FROM pgq.jobs") == 4  # nothing else was enqueued
    faults.check_history()


def test_no_follow_ups_from_a_raising_attempt_a_cancelled_job_or_a_lost_lease(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    worker = spawn_worker("--queue", "work", "--concurrency", "4", "--lease", "6", "--name", "fu")
    retried = pgq_queue.enqueue("with_follow_ups", {"n": 1, "fail_first": True}, queue="work")
    cancelled = pgq_queue.enqueue("with_follow_ups", {"n": 2, "gate": True}, queue="work")
    stolen = pgq_queue.enqueue("with_follow_ups", {"n": 3, "gate": True}, queue="work")
    wait_for(lambda: len(effects_of(db, cancelled, "started")) + len(effects_of(db, stolen, "started")) == 2, 20,
             "the gated handlers to start")

    # Cancelled while its handler waits: the handler then returns, and nothing is sent for it.
    pgq_queue.cancel(cancelled)
    wait_for(lambda: f"job {cancelled} with_follow_ups: cancelled" in worker.log(), 10, "the interruption")
    db.rows("INSERT INTO effects (job_id, kind, note) VALUES (%s, 'gate', 'open')", (cancelled,))

    # Another attempt takes `stolen` over (a new lease token, as a rescue and a claim elsewhere would
    # give it) right after a heartbeat renewed it, and completes it; then its first handler returns.
    lease = db.value("SELECT lease_expires_at FROM pgq.jobs WHERE id = %s", (stolen,))
    wait_for(lambda: db.value("SELECT lease_expires_at FROM pgq.jobs WHERE id = %s", (stolen,)) != lease, 10,
             "a heartbeat of the stolen job")
    token = db.value("UPDATE pgq.jobs SET lease_token = gen_random_uuid(), attempts = attempts + 1, "
                     "claimed_by = 'thief', lease_expires_at = now() + interval '60 s' "
                     "WHERE id = %s AND status = 'running' RETURNING lease_token::text", (stolen,))
    job = pgq_queue.get(stolen)
    assert job is not None
    pgq_queue.complete(pgq.Claim(job=job, token=token, lease=dt.timedelta(seconds=60)), {"by": "thief"})
    db.rows("INSERT INTO effects (job_id, kind, note) VALUES (%s, 'gate', 'open')", (stolen,))
    wait_for(lambda: f"job {stolen} with_follow_ups: complete refused: lease lost" in worker.log(), 10,
             "the first attempt's completion to be refused")

    wait_for(lambda: db.value("SELECT status::text FROM pgq.jobs WHERE id = %s", (retried,)) == "succeeded", 20,
             "the retried job to succeed")
    assert [r["attempt"] for r in effects_of(db, retried, "started")] == [1, 2]
    assert_follow_ups_once(db, retried, 1)  # from the second attempt only
    assert [r["attempt"] for r in effects_of(db, stolen, "effect")] == [1]  # its handler did return
    assert [r["attempt"] for r in effects_of(db, cancelled, "effect")] == [1]
    assert follow_ups(db, cancelled) == [] and follow_ups(db, stolen) == []
    assert db.rows("SELECT id, status::text AS status, result FROM pgq.jobs WHERE id = ANY(%s) ORDER BY id",
                   ([cancelled, stolen],)) == [{"id": cancelled, "status": "cancelled", "result": None},
                                               {"id": stolen, "status": "succeeded", "result": {"by": "thief"}}]
    assert worker.alive()


def test_on_failure_once_after_the_last_attempt_and_a_held_dedupe_key_adds_no_job(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    held = pgq_queue.enqueue("follow_up", {"held": True}, queue="follow", dedupe_key="fu:7")
    ok = pgq_queue.enqueue("noted", {"n": 1}, queue="work")
    bad = pgq_queue.enqueue("noted", {"n": 2, "fail": True}, queue="work", max_attempts=3)
    keyed = pgq_queue.enqueue("with_follow_ups", {"n": 7}, queue="work")
    spawn_worker("--queue", "work", "--concurrency", "4", "--name", "notes")
    wait_for(lambda: db.value("SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s) AND status IN ('succeeded', "
                              "'failed')", ([ok, bad, keyed],)) == 3, 30, "the three jobs to finish")
    jobs = {r["id"]: r for r in db.rows("SELECT id, status::text AS status, attempts, finished_at FROM pgq.jobs")}
    assert [(jobs[i]["status"], jobs[i]["attempts"]) for i in (ok, bad)] == [("succeeded", 1), ("failed", 3)]
    notes = db.rows("SELECT kind, payload, queue, created_at FROM pgq.jobs WHERE kind LIKE '%%_note' ORDER BY id")
    ok_token = db.value("SELECT token::text FROM effects WHERE job_id = %s", (ok,))
    assert [(n["kind"], n["payload"], n["queue"], n["created_at"]) for n in notes] == [
        ("success_note", {"job_id": ok, "result": {"n": 1, "token": ok_token}}, "default", jobs[ok]["finished_at"]),
        ("failure_note", {"job_id": bad, "error": "ValueError: noted 2 fails"}, "default", jobs[bad]["finished_at"]),
    ]  # one note for the failure, with the third attempt's failure; none from the two retries
    # The follow-up whose dedupe key an active job holds is that job: no second one.
    assert [(r["id"], r["payload"]) for r in db.rows(
        "SELECT id, payload FROM pgq.jobs WHERE dedupe_key = 'fu:7'")] == [(held, {"held": True})]
    assert jobs[keyed]["status"] == "succeeded"
    assert [r["payload"] for r in follow_ups(db, keyed)] == [{"parent": keyed, "i": 1}, {"parent": keyed, "i": 2}]


def test_on_failure_once_when_the_last_attempt_dies_with_its_worker(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    job_id = pgq_queue.enqueue("noted", {"n": 1, "ms": 60_000}, queue="work", max_attempts=1)
    victim = spawn_worker("--queue", "work", "--lease", "1.5", "--name", "victim")
    wait_for(lambda: db.value("SELECT status::text FROM pgq.jobs WHERE id = %s", (job_id,)) == "running", 20,
             "the job to start")
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    rescuers = [spawn_worker("--queue", "work", "--lease", "1.5", "--rescue-interval", "0.3", "--name", f"r{i}")
                for i in range(2)]
    wait_for(lambda: db.value("SELECT status::text FROM pgq.jobs WHERE id = %s", (job_id,)) == "failed", 20,
             "the rescue to fail the job")
    time.sleep(1.0)  # both rescuers ran their rescue again meanwhile
    job = db.rows("SELECT finished_at, last_error FROM pgq.jobs WHERE id = %s", (job_id,))[0]
    notes = db.rows("SELECT kind, payload, created_at FROM pgq.jobs WHERE kind LIKE '%%_note'")
    assert [(n["kind"], n["payload"]["job_id"], n["created_at"]) for n in notes] == [
        ("failure_note", job_id, job["finished_at"])]
    assert notes[0]["payload"]["error"].startswith("lease expired on the last attempt"), notes
    assert all(r.alive() for r in rescuers)


PARENTS = 3000
FAILING = 0.1  # share of the parents that fail for good
THREADS = 6


def test_children_enqueued_while_their_parents_complete_end_released_or_cancelled(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(7)
    history.install(db.conn)
    specs = [pgq.JobSpec("doomed_root", {"n": n, "ms": 3}, queue="work") if rng.random() < FAILING
             else pgq.JobSpec("chaos", {"n": n, "ms": 3, "rerun_ms": 3}, queue="work") for n in range(PARENTS)]
    parents = pgq_queue.enqueue_many(specs)
    stop = threading.Event()
    errors: list[BaseException] = []
    children: list[tuple[int, list[int], bool]] = []  # (child, parents, runs whatever their outcome)

    def enqueue_children(seed: int) -> None:
        picker = random.Random(seed)
        try:
            with psycopg.connect(db.dsn, autocommit=True) as conn:
                while not stop.is_set():
                    # Parents running right now (a worker is about to complete them), and one anywhere.
                    running = [r[0] for r in conn.execute(
                        "SELECT id FROM pgq.jobs WHERE status = 'running' AND queue = 'work' LIMIT 50")]
                    if not running:
                        time.sleep(0.001)
                        continue
                    chosen = picker.sample(running, min(len(running), picker.randint(1, 3)))
                    chosen.append(picker.choice(parents))
                    runs = picker.random() < 0.2
                    child = pgq_queue.enqueue("child", {"parents": chosen}, queue="kids", depends_on=chosen,
                                              on_parent_failure="run" if runs else "cancel")
                    children.append((child, sorted(set(chosen)), runs))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=enqueue_children, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    workers = [spawn_worker("--queue", "work", "--concurrency", "8", "--log-level", "WARNING", "--name", f"w{i}")
               for i in range(2)]
    try:
        wait_for(lambda: errors or db.value("SELECT count(*) FROM pgq.jobs WHERE queue = 'work' AND status IN "
                                            "('queued', 'running')") == 0, 60, "the parents to finish", interval=0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not errors, errors
    # A child enqueued while its parent's completion was in flight can commit after that completion
    # looked for children: the workers' settle step (each second) releases or cancels it.
    settled = db.value("SELECT count(*) FROM pgq.jobs WHERE queue = 'kids' AND status = 'waiting'")
    wait_for(lambda: db.value("SELECT count(*) FROM pgq.jobs WHERE queue = 'kids' AND status = 'waiting'") == 0,
             15, "the settle step to release the last children", interval=0.1)
    status = {r["id"]: r for r in db.rows("SELECT id, status::text AS status, last_error, pending_parents "
                                          "FROM pgq.jobs")}
    wrong = []
    for child, chosen, runs in children:
        failed = [p for p in chosen if status[p]["status"] != "succeeded"]
        row = status[child]
        if failed and not runs:
            named = re.fullmatch(r"parent job (\d+) failed", row["last_error"] or "")
            if row["status"] != "cancelled" or named is None or int(named[1]) not in failed:
                wrong.append((child, chosen, runs, row))
        elif (row["status"], row["pending_parents"]) != ("queued", 0):
            wrong.append((child, chosen, runs, row))
    inserted = {r["s"]: r["c"] for r in db.rows(
        "SELECT new_status AS s, count(*) AS c FROM history WHERE event = 'enqueue' AND kind = 'child' GROUP BY 1")}
    with capsys.disabled():
        print(f"\n{len(children)} children of {PARENTS} parents enqueued by {THREADS} threads while 2 workers "
              f"completed the parents: inserted {inserted}; {settled} left for the settle step; {len(wrong)} wrong")
    assert not wrong, wrong[:10]
    assert db.value("SELECT count(*) FROM pgq.jobs WHERE status::text = 'waiting'") == 0
    assert db.value("SELECT count(*) FROM pgq.job_dependencies WHERE parent_outcome IS NULL") == 0
    # Both sides of the race happened: children that waited and were released or cancelled by a parent's
    # completion, and children whose chosen parents had finished by the time their enqueue ran.
    assert inserted.get("waiting", 0) >= 100 and inserted.get("queued", 0) + inserted.get("cancelled", 0) >= 10
    for worker in workers:
        assert worker.alive(), worker.log()[-3000:]
