"""Concurrency claims, tested with real concurrency: many connections racing in threads, assertions
over the whole outcome."""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time

import psycopg
import pytest

from pgq import Claim, JobSpec, JobStatus, Queue, _ops

from ..worker.conftest import wait_for
from .conftest import SQL


def _run_threads(n: int, target: object) -> None:
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            target(i)  # type: ignore[operator]
        except BaseException as exc:  # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    if errors:
        raise errors[0]


@pytest.mark.slow
def test_8_claimers_2000_jobs_every_job_claimed_exactly_once(pgq_dsn: str, db: SQL) -> None:
    with Queue(pgq_dsn) as producer:
        producer.enqueue_many([JobSpec("k", {"i": i}) for i in range(2000)])
    claimed: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def claimer(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            barrier.wait()
            while True:
                claims = q.claim(worker=f"w{i}", limit=random.randint(1, 25))
                if not claims:
                    return
                claimed[i].extend(c.id for c in claims)
                q.complete_many([(c, None) for c in claims])

    _run_threads(8, claimer)
    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == 2000 and len(set(every)) == 2000
    assert sum(1 for ids in claimed if ids) > 1, "no real race: a single claimer took everything"
    assert db("SELECT status::text, count(*) AS n, max(attempts) AS a FROM pgq.jobs GROUP BY 1") == [
        {"status": "succeeded", "n": 2000, "a": 1}]


@pytest.mark.slow
@pytest.mark.parametrize("queues", [None, ["default"]], ids=["all-queues", "one-queue-fast-path"])
def test_concurrency_limit_of_3_never_exceeded_by_16_racing_claimers(pgq_dsn: str, queues: list[str] | None) -> None:
    with Queue(pgq_dsn) as admin:
        admin.set_concurrency_limit("limited", 3)
        admin.enqueue_many([JobSpec("limited", {"i": i}) for i in range(150)]
                           + [JobSpec("free", {"i": i}) for i in range(150)])
    stop = threading.Event()
    samples: list[int] = []
    finished_limited = collections.Counter[str]()
    lock = threading.Lock()

    def sampler() -> None:
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pgq.jobs WHERE kind = 'limited' AND status = 'running'").fetchone()
                assert row is not None
                samples.append(row[0])

    sampling = threading.Thread(target=sampler)
    sampling.start()
    barrier = threading.Barrier(16)

    def claimer(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            barrier.wait()
            idle_since = None
            while True:
                claims = q.claim(worker=f"w{i}", queues=queues, limit=4)
                if not claims:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 1.0:
                        return
                    continue
                idle_since = None
                time.sleep(random.uniform(0, 0.004))  # hold the jobs a moment, as a handler would
                q.complete_many([(c, None) for c in claims])
                with lock:
                    finished_limited.update(c.job.kind for c in claims)

    try:
        _run_threads(16, claimer)
    finally:
        stop.set()
        sampling.join()
    assert finished_limited == {"limited": 150, "free": 150}
    assert max(samples) <= 3, f"limit exceeded: {max(samples)} running"
    assert max(samples) == 3, "the race never reached the limit: test did not exercise it"
    assert len(samples) > 50


@pytest.mark.slow
def test_watermark_bumps_racing_with_runs_never_overlap_and_end_processed(pgq_dsn: str, db: SQL) -> None:
    """Producers raise the watermark of one key while workers run it: never two runs at once, and
    once quiet, the last successful run processed the highest watermark enqueued."""
    stop = threading.Event()
    highest = [0]
    concurrent_runs = [0]
    max_concurrent = [0]
    lock = threading.Lock()

    def producer(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            for w in range(1, 101):
                mark = w * 10 + i
                q.enqueue("build", dedupe_key="doc", watermark=mark)
                with lock:
                    highest[0] = max(highest[0], mark)

    def worker(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            while not stop.is_set():
                claims = q.claim(worker=f"w{i}")
                if not claims:
                    time.sleep(0.001)
                    continue
                with lock:
                    concurrent_runs[0] += 1
                    max_concurrent[0] = max(max_concurrent[0], concurrent_runs[0])
                time.sleep(0.002)
                with lock:
                    concurrent_runs[0] -= 1
                q.complete(claims[0])

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in workers:
        t.start()
    try:
        _run_threads(3, producer)
        # Quiet means no active job and no raise left: a raise committed after its job's completion
        # is run by the settle, which real workers call each second (revision 0016), so call it here.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and db(
                "SELECT 1 FROM pgq.jobs WHERE status IN ('queued', 'running')"
                " UNION ALL SELECT 1 FROM pgq.key_raises"):
            db("SELECT pgq.settle(100)")
            time.sleep(0.01)
    finally:
        stop.set()
        for t in workers:
            t.join()
    assert max_concurrent[0] == 1
    rows = db("SELECT status::text, done_watermark FROM pgq.jobs WHERE dedupe_key = 'doc' ORDER BY id DESC")
    assert rows[0]["status"] == JobStatus.SUCCEEDED.value
    [mark] = db("SELECT done_watermark FROM pgq.key_watermarks WHERE dedupe_key = 'doc'")
    assert mark["done_watermark"] == highest[0]


def _hung_claim(dsn: str, release: threading.Event) -> tuple[threading.Thread, list[BaseException], list[int]]:
    """A client that runs a claim in a transaction pgq opens (as it opens one for an acknowledgement
    with follow-up jobs, or an enqueue mixing dependencies and dedupe keys) and hangs before its
    COMMIT until `release` is set, on a connection of its own. Returns its thread, the error it ended
    with (if any), and its backend pid."""
    outcome: list[BaseException] = []
    pid: list[int] = []
    claim = dataclasses.replace(_ops.claim(worker="hung", queues=["a", "b"], kinds=None, limit=5, lease=60),
                                transaction=True)

    def hung_steps() -> _ops.Steps[list[Claim]]:
        claims = yield from claim.steps()
        release.wait(60)  # the client hangs here: the transaction is open, the rows locked
        return claims

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid.append(conn.info.backend_pid)
            try:
                _ops.run_sync(conn, dataclasses.replace(claim, steps=hung_steps), own_transaction=True)
            except BaseException as exc:  # reported to the test
                outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome, pid


def test_a_transaction_pgq_opened_and_a_hung_client_left_idle_is_ended_freeing_its_rows(
        pgq_dsn: str, db: SQL) -> None:
    # Without the guard, the jobs stay locked (skipped by every other claim) for as long as the
    # client hangs, and so would any other worker's running job whose new version the claim's
    # FOR UPDATE locked before finding it no longer queued (see transaction_guard.sql).
    with Queue(pgq_dsn) as queue:
        ids = queue.enqueue_many([JobSpec("k", queue="ab"[n % 2]) for n in range(5)])
        release = threading.Event()
        thread, outcome, pid = _hung_claim(pgq_dsn, release)
        try:
            def idle_in_transaction() -> bool:
                return bool(pid) and db("SELECT state FROM pg_stat_activity WHERE pid = %s",
                                        (pid[0],)) == [{"state": "idle in transaction"}]

            wait_for(idle_in_transaction, 10, "the hung client's claim", interval=0.05)
            assert queue.claim(worker="other", queues=["a", "b"], limit=10) == []  # locked by the hung claim
            started = time.monotonic()
            claimed: list[Claim] = []

            def claimed_all() -> bool:
                claimed.extend(queue.claim(worker="other", queues=["a", "b"], limit=10))
                return len(claimed) == 5

            wait_for(claimed_all, 20, "the jobs to be released by the server", interval=0.05)
            waited = time.monotonic() - started
        finally:
            release.set()
            thread.join(30)
    assert not thread.is_alive()
    assert sorted(c.id for c in claimed) == sorted(ids) and {c.job.attempts for c in claimed} == {1}
    assert 3.0 < waited < 15.0, waited  # about TRANSACTION_IDLE_LIMIT (5 s) after the hang began
    # The hung client's COMMIT found its session ended.
    assert len(outcome) == 1 and isinstance(outcome[0], psycopg.Error), outcome


def test_the_transaction_guard_stays_inside_pgqs_own_transactions(pgq_dsn: str, db: SQL) -> None:
    claim = dataclasses.replace(_ops.claim(worker="w", queues=["a", "b"], kinds=None, limit=1, lease=60),
                                transaction=True)
    settings = "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('jit')"
    inside: list[tuple[str, str] | None] = []
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:  # pgq opens (and ends) the transaction
        conn.execute("SET jit = on")

        def probed() -> _ops.Steps[list[Claim]]:
            claims = yield from claim.steps()
            inside.append(conn.execute(settings).fetchone())  # still in pgq's transaction
            return claims

        _ops.run_sync(conn, dataclasses.replace(claim, steps=probed), own_transaction=True)
        assert inside == [("5s", "off")]
        assert conn.execute(settings).fetchone() == ("0", "on")
    with psycopg.connect(pgq_dsn) as conn:  # the caller's transaction: pgq only adds a savepoint
        conn.execute("SET jit = on")
        _ops.run_sync(conn, claim, own_transaction=True)
        assert conn.execute(settings).fetchone() == ("0", "on")
        conn.rollback()



def test_an_enqueue_never_deadlocks_with_a_batch_acknowledgement_of_its_parents(pgq_dsn: str, db: SQL) -> None:
    # An acknowledgement locks the jobs of its batch in its plan's order, here the order they
    # finished in: P2, X, P1. A third session holds X, so the acknowledgement stops holding P2 while
    # an enqueue of a child of P1 and P2 starts. Had the enqueue taken P1 and waited for P2, the
    # acknowledgement would wait for P1 once X is free: a deadlock, which PostgreSQL breaks after a
    # second by failing one side (the enqueue raised DeadlockDetected). It takes both or neither.
    # Since acknowledgements skip locked rows (sql/job_complete.sql), the batch finishes P2 and P1
    # at once and only then waits for X, holding nothing else: the enqueue may not wait at all.
    with Queue(pgq_dsn) as queue:
        p1, p2, x = queue.enqueue_many([JobSpec("parent") for _ in range(3)])
        claims = {c.id: c for c in queue.claim(worker="t", limit=3, lease=60)}
        assert sorted(claims) == [p1, p2, x]
        holder = psycopg.connect(pgq_dsn)
        holder.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [x])
        errors: list[BaseException] = []
        child: list[int] = []

        def blocked(statement: str) -> bool:
            return bool(db("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                           "AND state = 'active' AND wait_event_type IN ('Lock', 'Timeout') AND query LIKE %s",
                           [f"-- {statement}:%"])[0]["n"])

        def ack() -> None:
            try:
                with Queue(pgq_dsn, max_size=1) as acker:
                    acker.complete_many([(claims[p2], None), (claims[x], None), (claims[p1], None)])
            except BaseException as exc:
                errors.append(exc)

        def enqueue() -> None:
            try:
                with Queue(pgq_dsn, max_size=1) as producer:
                    child.append(producer.enqueue("child", depends_on=[p1, p2]))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=ack), threading.Thread(target=enqueue)]
        try:
            threads[0].start()
            wait_for(lambda: blocked("job_complete"), 10, "the acknowledgement to wait for X")
            threads[1].start()
            wait_for(lambda: blocked("job_enqueue_after") or child or errors, 10,
                     "the enqueue to wait for a parent, or to finish")
        finally:
            holder.rollback()
            holder.close()
            for t in threads:
                t.join(30)
        assert not errors, errors
        assert [r["status"] for r in db("SELECT status::text FROM pgq.jobs WHERE id = ANY(%s) ORDER BY id",
                                        [[p1, p2, x, *child]])] == ["succeeded", "succeeded", "succeeded", "queued"]


def test_two_acknowledgements_releasing_shared_children_never_deadlock(pgq_dsn: str, db: SQL) -> None:
    # Two batches finish parents A, B and C, D; children P (of A and D), Q (of B and C) and R (of A
    # and C) each wait for one parent of each batch. Releasing them parent by parent, batch 1 locks
    # P and R (for A) then Q (for B), batch 2 locks Q and R (for C) then P (for D): with a third
    # session holding R until both wait for it, batch 1 gets R and waits for Q, which batch 2 holds
    # while it waits for R, a deadlock that PostgreSQL broke after a second by failing one batch.
    # A batch must lock all the children it releases in one order.
    with Queue(pgq_dsn) as queue:
        a, b, c, d = queue.enqueue_many([JobSpec("parent") for _ in range(4)])
        p, q, r = (queue.enqueue("child", depends_on=parents) for parents in ([a, d], [b, c], [a, c]))
        claims = {cl.id: cl for cl in queue.claim(worker="t", limit=4, lease=60)}
        assert sorted(claims) == [a, b, c, d] and p < q < r
        holder = psycopg.connect(pgq_dsn)
        holder.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [r])
        errors: list[BaseException] = []

        def waiting() -> int:
            return int(db("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                          "AND wait_event_type = 'Lock' AND query LIKE '-- job_complete:%%'")[0]["n"])

        def ack(batch: list[int]) -> None:
            try:
                with Queue(pgq_dsn, max_size=1) as acker:
                    acker.complete_many([(claims[i], None) for i in batch])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=ack, args=([a, b],)), threading.Thread(target=ack, args=([c, d],))]
        try:
            threads[0].start()
            wait_for(lambda: waiting() == 1, 10, "the first batch to wait for R")
            threads[1].start()
            wait_for(lambda: waiting() == 2, 10, "the second batch to wait too")
        finally:
            holder.rollback()
            holder.close()
            for t in threads:
                t.join(30)
        assert not errors, errors
        assert [(row["status"], row["pending_parents"]) for row in db(
            "SELECT status::text, pending_parents FROM pgq.jobs WHERE id = ANY(%s) ORDER BY id", [[p, q, r]])
        ] == [("queued", 0)] * 3


def _fail_at_once(pgq_dsn: str, claims: list[list[Claim]]) -> list[BaseException]:
    """Fail each list of `claims` for good in its own connection, all released by one barrier;
    return the errors raised."""
    barrier = threading.Barrier(len(claims))
    errors: list[BaseException] = []

    def fail(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as failer:
            failer.get(claims[i][0].id)  # connected before the barrier
            barrier.wait(30)
            for claim in claims[i]:
                failer.fail(claim, "boom", final=True)

    try:
        _run_threads(len(claims), fail)
    except BaseException as exc:
        errors.append(exc)
    return errors


def test_two_failing_parents_cascading_through_one_graph_never_deadlock(pgq_dsn: str, db: SQL) -> None:
    # P -> A, P -> D, A -> B, Q -> B, B -> D. Cascading level by level, failing P locked A and D, then
    # (cancelling A) wanted B; failing Q locked B, then (cancelling B) wanted D: a deadlock, which
    # PostgreSQL broke after a second by failing one side. A third session holds D until both wait
    # (P's failure for D, Q's cascade for D too), so the failure of P gets D first and then wants B.
    # Each cascade must lock everything it can reach up front, in id order.
    with Queue(pgq_dsn) as queue:
        p, q = queue.enqueue_many([JobSpec("parent"), JobSpec("parent")])
        a = queue.enqueue("child", depends_on=[p])
        b = queue.enqueue("child", depends_on=[a, q])
        d = queue.enqueue("child", depends_on=[p, b])
        claims = {c.id: c for c in queue.claim(worker="t", limit=2, lease=60)}
        assert sorted(claims) == [p, q]
        holder = psycopg.connect(pgq_dsn)
        holder.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [d])
        errors: list[BaseException] = []

        def waiting() -> int:
            return int(db("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                          "AND wait_event_type = 'Lock' AND query LIKE '-- job_fail:%%'")[0]["n"])

        def fail(parent: int) -> None:
            try:
                with Queue(pgq_dsn, max_size=1) as failer:
                    failer.fail(claims[parent], "boom", final=True)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=fail, args=(p,)), threading.Thread(target=fail, args=(q,))]
        try:
            threads[0].start()
            wait_for(lambda: waiting() == 1, 10, "the failure of P to wait for D")
            threads[1].start()
            wait_for(lambda: waiting() == 2 or bool(errors), 10, "the failure of Q to wait too")
        finally:
            holder.rollback()
            holder.close()
            for t in threads:
                t.join(30)
        assert not errors, errors
        assert [r["status"] for r in db("SELECT status::text FROM pgq.jobs WHERE id = ANY(%s) ORDER BY id",
                                        [[p, q, a, b, d]])] == ["failed", "failed", "cancelled", "cancelled",
                                                                "cancelled"]


@pytest.mark.parametrize("seed", range(20))
def test_parents_failing_at_once_in_a_random_graph_cancel_all_they_doom_without_deadlock(
        pgq_dsn: str, db: SQL, seed: int) -> None:
    # Eight roots, 60 jobs below them with one to three random earlier parents each (some run
    # whatever their parents' outcome); four connections fail two roots each at one barrier. No
    # deadlock, and every job ends as its parents dictate.
    rng = random.Random(seed)
    with Queue(pgq_dsn) as queue:
        roots = queue.enqueue_many([JobSpec("root") for _ in range(8)])
        ids = list(roots)
        edges: dict[int, list[int]] = {}
        runs: dict[int, bool] = {}
        for _ in range(60):
            parents = rng.sample(ids[-20:], rng.randint(1, min(3, len(ids[-20:]))))
            run = rng.random() < 0.2
            child = queue.enqueue("node", depends_on=parents, on_parent_failure="run" if run else "cancel")
            edges[child], runs[child] = parents, run
            ids.append(child)
        claims = {c.id: c for c in queue.claim(worker="t", limit=8, lease=60)}
        assert sorted(claims) == sorted(roots)
        order = rng.sample(roots, 8)
        assert _fail_at_once(pgq_dsn, [[claims[i] for i in order[k::4]] for k in range(4)]) == []
    status = {r["id"]: r["status"] for r in db("SELECT id, status::text FROM pgq.jobs")}
    pending = {r["id"]: r["pending_parents"] for r in db("SELECT id, pending_parents FROM pgq.jobs")}
    expected: dict[int, str] = {root: "failed" for root in roots}
    for child in ids[8:]:
        outcomes = [expected[parent] for parent in edges[child]]
        unfinished = sum(o in ("waiting", "queued") for o in outcomes)
        if not runs[child] and any(o in ("failed", "cancelled") for o in outcomes):
            expected[child] = "cancelled"
        else:
            expected[child] = "waiting" if unfinished else "queued"
        if expected[child] != "cancelled":
            assert pending[child] == unfinished, child
    assert status == expected


def test_retrying_a_cancelled_child_while_its_last_parent_succeeds_never_leaves_it_stale(
        pgq_dsn: str, db: SQL) -> None:
    # C depends on P and R; P failed and cancelled C; R runs. One connection completes R while
    # another retries C, at one barrier, 30 times. Whichever commits first, C ends queued with no
    # parent pending and R's outcome on its edge: never waiting for a parent that already finished
    # (retry counted R as running from a snapshot taken before R's completion committed), never
    # queued with R's edge open.
    with Queue(pgq_dsn) as queue:
        rounds = []
        for _ in range(30):
            p = queue.enqueue("fetch", max_attempts=1)
            r = queue.enqueue("other")
            c = queue.enqueue("merge", depends_on=[p, r])
            rounds.append((p, r, c))
        fetches = {cl.id: cl for cl in queue.claim(worker="t", kinds=["fetch"], limit=30, lease=60)}
        queue.fail_many([(fetches[p], "boom") for p, _, _ in rounds])
        others = {cl.id: cl for cl in queue.claim(worker="t", kinds=["other"], limit=30, lease=60)}
        assert len(fetches) == len(others) == 30
        with Queue(pgq_dsn, max_size=1) as acker, Queue(pgq_dsn, max_size=1) as admin:
            acker.get(rounds[0][0])
            admin.get(rounds[0][0])
            for _, r, c in rounds:
                assert admin.get(c).status is JobStatus.CANCELLED  # type: ignore[union-attr]
                barrier = threading.Barrier(2)

                def race(i: int, r: int = r, c: int = c, barrier: threading.Barrier = barrier) -> None:
                    barrier.wait(30)
                    if i == 0:
                        acker.complete(others[r])
                    else:
                        admin.retry(c)

                _run_threads(2, race)
    outcomes: collections.Counter[tuple[str, int, str]] = collections.Counter()
    for _, r, c in rounds:
        [row] = db("SELECT c.status::text AS status, c.pending_parents, d.parent_outcome::text AS outcome "
                   "FROM pgq.jobs c JOIN pgq.job_dependencies d ON d.job_id = c.id AND d.parent_id = %s "
                   "WHERE c.id = %s", [r, c])
        outcomes[(row["status"], row["pending_parents"], row["outcome"])] += 1
    assert outcomes == {("queued", 0, "succeeded"): 30}
