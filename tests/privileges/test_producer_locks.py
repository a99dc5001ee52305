"""A producer that sits in an open transaction after calling the functions of its grant (issue 30).

pgq.enqueue_after (every active job as a parent) and pgq.mark_awaited hold nothing a worker or an
admin waits for (revision 0012): the parents are claimed, acknowledged and cancelled while the
producer's transaction is open, and what their finish could not see (the edges and the wait that
commit later) is settled by the rescue. pgq.enqueue_many with dedupe keys locks no job either
(revision 0016): a watermark above the active job's is a row of pgq.key_raises, which the claim,
the completion and the settle apply."""

from __future__ import annotations

from typing import Any

import psycopg

import pgq
from pgq import _ops
from pgq.models import JobStatus

from .conftest import Roles
from .test_roles import rows


def _ack(dsn: str, op: _ops.Operation[Any]) -> Any:
    """Run a worker's acknowledgement as the worker process does (its own transaction), in a session
    with no lock_timeout of its own: only pgq's guard keeps it from waiting."""
    with psycopg.connect(dsn, autocommit=True, options="-c lock_timeout=0") as conn:
        return _ops.run_sync(conn, op, own_transaction=True)


def _refused(login: str, statements: list[str]) -> None:
    """Each statement, run as `login` in a session of its own, is refused for lack of privilege."""
    for statement in statements:
        with psycopg.connect(login, autocommit=True) as conn:
            try:
                conn.execute(statement)
            except psycopg.errors.InsufficientPrivilege:
                continue
        raise AssertionError(f"{statement!r} went through as {login}")


def test_a_producer_holding_dependencies_and_waits_open_delays_no_worker_and_no_admin(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        parents = [q.enqueue("k", queue="q") for _ in range(5)]
    with pgq.Queue(roles.worker) as w:
        running = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=2)}
    assert sorted(running) == parents[:2]

    listener = psycopg.connect(roles.producer, autocommit=True)
    producer = psycopg.connect(roles.producer)  # not autocommit: the transaction stays open
    try:
        listener.execute("LISTEN pgq_finished")
        (child,) = producer.execute(
            "SELECT id FROM pgq.enqueue_after(ARRAY['child'], ARRAY['{}'::jsonb], ARRAY['c'], NULL, NULL, NULL, "
            "NULL, NULL, %s, %s)", [[1] * len(parents), parents]).fetchone() or (None,)
        marked = producer.execute("SELECT id FROM pgq.mark_awaited(%s)", [parents[2]]).fetchall()
        assert marked == [(parents[2],)]
        # Now idle in its transaction. Claims take the parents it named ...
        with pgq.Queue(roles.worker) as w:
            claimed = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=2)}
        assert sorted(claimed) == parents[2:4]
        # ... the worker finishes all of them, none busy, none waiting on the producer ...
        busy: set[int] = set()
        done = _ack(roles.worker, _ops.complete([(c, None, None) for c in [*running.values(), *claimed.values()]],
                                                raise_lost=False, busy=busy))
        assert busy == set() and set(done) == set(parents[:4])
        # ... and an admin cancels the last one, which the producer named too.
        with pgq.Queue(roles.admin) as a:
            assert a.cancel(parents[4]).status is JobStatus.CANCELLED
        producer.commit()
    finally:
        producer.close()

    # The parents finished before the edges and the wait committed: their finish could not see them.
    # The child waits (its last parent was cancelled, so it is due to be cancelled), the wait is
    # unanswered, until the worker's rescue settles both.
    assert rows(roles.dsn, "SELECT status::text AS s FROM pgq.jobs WHERE id = %s", [child]) == [{"s": "waiting"}]
    rows(roles.worker, "SELECT * FROM pgq.rescue(10)")
    assert rows(roles.dsn, "SELECT status::text AS s, last_error FROM pgq.jobs WHERE id = %s", [child]) == [
        {"s": "cancelled", "last_error": f"parent job {parents[4]} cancelled"}]
    told = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    listener.close()
    assert told == [str(parents[2])]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.awaited_jobs") == [{"n": 0}]


def test_a_child_whose_parents_finish_while_its_producer_is_open_runs_after_the_settle(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        parent = q.enqueue("k", queue="q")
    with pgq.Queue(roles.worker) as w:
        (job,) = w.claim(worker="w", queues=["q"], limit=1)
    with psycopg.connect(roles.producer) as producer:
        (child,) = producer.execute(
            "SELECT id FROM pgq.enqueue_after(ARRAY['child'], ARRAY['{}'::jsonb], ARRAY['q'], NULL, NULL, NULL, "
            "NULL, NULL, ARRAY[1], ARRAY[%s::bigint])", [parent]).fetchone() or (None,)
        assert set(_ack(roles.worker, _ops.complete([(job, None, None)], raise_lost=False, busy=set()))) == {parent}
    # Committed: waiting for a parent that succeeded. The settle (as the rescue runs it) queues it.
    assert rows(roles.dsn, "SELECT status::text AS s, pending_parents AS n FROM pgq.jobs WHERE id = %s",
                [child]) == [{"s": "waiting", "n": 1}]
    rows(roles.worker, "SELECT * FROM pgq.rescue(10)")
    assert rows(roles.dsn, "SELECT status::text AS s, pending_parents AS n FROM pgq.jobs WHERE id = %s",
                [child]) == [{"s": "queued", "n": 0}]
    with pgq.Queue(roles.worker) as w:
        assert [c.id for c in w.claim(worker="w", queues=["q"], limit=5)] == [child]


def test_keyed_enqueues_held_open_delay_no_claim_no_acknowledgement_and_no_cancel(roles: Roles) -> None:
    """Revision 0016: a producer sits in its transaction after enqueueing onto every active key, with
    and without a watermark. Its enqueues answered with the active jobs and locked none of them: a
    claim takes the queued keyed job, the worker completes the running ones (none busy, even without
    the skip path's retry), an admin cancels one at once. The raise it committed after those finishes
    runs once, about a settle later, as a new job of the key."""
    with pgq.Queue(roles.dsn) as q:
        running_wm = q.enqueue("k", queue="q", dedupe_key="wm", watermark=1)
        running_plain = q.enqueue("k", queue="q", dedupe_key="plain")
    with pgq.Queue(roles.worker) as w:
        running = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=2)}
    assert sorted(running) == [running_wm, running_plain]
    with pgq.Queue(roles.dsn) as q:
        queued = q.enqueue("k", queue="q", dedupe_key="queued", watermark=1)
        doomed = q.enqueue("k", queue="q", dedupe_key="doomed")

    producer = psycopg.connect(roles.producer)  # not autocommit: the transaction stays open
    try:
        answers = producer.execute(
            "SELECT e.id FROM pgq.enqueue_many(ARRAY['k','k','k','k'], NULL, ARRAY['q','q','q','q'], NULL, NULL, "
            "NULL, ARRAY['wm','plain','queued','doomed'], ARRAY[2, NULL, 2, NULL]::bigint[], NULL) e "
            "ORDER BY e.ord").fetchall()
        assert [a for (a,) in answers] == [running_wm, running_plain, queued, doomed]
        # The producer's transaction holds no row of pgq.jobs.
        held = rows(roles.dsn, "SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                               "WHERE a.pid = %s AND l.locktype = 'tuple'", [producer.info.backend_pid])
        assert held == [{"n": 0}]
        with pgq.Queue(roles.worker) as w:
            claimed = w.claim(worker="w", queues=["q"], limit=1, lease=60)
        assert [c.id for c in claimed] == [queued] and claimed[0].job.input_watermark == 1
        busy: set[int] = set()
        with psycopg.connect(roles.worker, autocommit=True, options="-c lock_timeout=0") as conn:
            done = _ops.run_sync(conn, _ops.complete([(c, None, None) for c in running.values()],
                                                     raise_lost=False, busy=busy), own_transaction=True)
        assert busy == set() and done == {running_wm: JobStatus.SUCCEEDED, running_plain: JobStatus.SUCCEEDED}
        with pgq.Queue(roles.admin) as a:
            assert a.cancel(doomed).status is JobStatus.CANCELLED
        producer.commit()
    finally:
        producer.close()

    # Committed after the completion of `wm` read the raises: watermark 2 is not done yet. The settle
    # enqueues the run that completion would have made; the claimed job's raise waits for its own
    # completion (the dirty re-run).
    assert rows(roles.dsn, "SELECT done_watermark AS d FROM pgq.key_watermarks WHERE dedupe_key = 'wm'") == [{"d": 1}]
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n")[0]["n"] >= 1
    again = rows(roles.dsn, "SELECT id, input_watermark AS w FROM pgq.jobs WHERE dedupe_key = 'wm' "
                            "AND status = 'queued'")
    assert len(again) == 1 and again[0]["w"] == 2 and again[0]["id"] != running_wm
    with pgq.Queue(roles.worker) as w:
        assert w.complete(claimed[0]) is JobStatus.QUEUED  # processed 1, raised to 2: once more
        runs = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=5)}
        assert sorted(runs) == sorted([again[0]["id"], queued])
        assert {c.job.input_watermark for c in runs.values()} == {2}
        for c in runs.values():
            assert w.complete(c) is JobStatus.SUCCEEDED
    assert rows(roles.dsn, "SELECT dedupe_key AS k, done_watermark AS d FROM pgq.key_watermarks ORDER BY 1") == [
        {"k": "queued", "d": 2}, {"k": "wm", "d": 2}]
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 0}]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.key_raises") == [{"n": 0}]
    # The plain key's job ran once; its enqueue made no new job.
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs WHERE dedupe_key = 'plain'") == [{"n": 1}]


def test_a_raise_committed_after_its_jobs_completion_runs_once_after_the_settle(roles: Roles) -> None:
    """The race the old FOR UPDATE closed: the raise commits after the completion of the key's job
    (which could not see it). The settle enqueues the run; a second raise to a watermark already
    done enqueues nothing, and nothing ran twice for a watermark."""
    with pgq.Queue(roles.dsn) as q:
        first = q.enqueue("k", {"n": 1}, queue="q", dedupe_key="doc", watermark=1)
    with pgq.Queue(roles.worker) as w:
        (job,) = w.claim(worker="w", queues=["q"])
    with psycopg.connect(roles.producer) as producer:
        (answer,) = producer.execute(
            "SELECT pgq.enqueue('k', '{\"n\": 3}', 'q', dedupe_key => 'doc', watermark => 3)").fetchone() or (None,)
        assert answer == first
        with pgq.Queue(roles.worker) as w:
            assert w.complete(job) is JobStatus.SUCCEEDED
    assert rows(roles.dsn, "SELECT watermark AS w, job_id FROM pgq.key_raises") == [{"w": 3, "job_id": first}]
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    (rerun,) = rows(roles.dsn, "SELECT id, payload, input_watermark AS w FROM pgq.jobs WHERE status = 'queued'")
    assert rerun["payload"] == {"n": 3} and rerun["w"] == 3
    with pgq.Queue(roles.worker) as w:
        (job,) = w.claim(worker="w", queues=["q"])
        assert job.id == rerun["id"] and w.complete(job) is JobStatus.SUCCEEDED
    assert rows(roles.dsn, "SELECT done_watermark AS d, job_id FROM pgq.key_watermarks") == [
        {"d": 3, "job_id": rerun["id"]}]
    # A raise to a watermark already done, committed after the run: the settle only deletes it.
    rows(roles.dsn, "INSERT INTO pgq.key_raises (queue, dedupe_key, watermark, job_id, kind, payload, priority, "
                    "run_at, max_attempts) VALUES ('q', 'doc', 2, %s, 'k', '{}', 0, now(), 25)", [rerun["id"]])
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs") == [{"n": 2}]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.key_raises") == [{"n": 0}]


def test_a_raise_written_before_its_job_failed_for_good_is_dropped_and_one_after_runs(roles: Roles) -> None:
    """Mirrors the old lock: a failure that waited for the enqueue failed the raised job and nothing
    ran it; an enqueue after the failure made a new job."""
    with pgq.Queue(roles.dsn) as q:
        first = q.enqueue("k", queue="q", dedupe_key="doc", watermark=1, max_attempts=1)
    with pgq.Queue(roles.worker) as w:
        (job,) = w.claim(worker="w", queues=["q"])
        with psycopg.connect(roles.producer) as producer:
            producer.execute("SELECT pgq.enqueue('k', queue => 'q', dedupe_key => 'doc', watermark => 2)")
        assert w.fail(job, "boom").status is JobStatus.FAILED
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT id FROM pgq.jobs") == [{"id": first}]
    # A raise written after the failure (as if its enqueue found the job still running) runs.
    rows(roles.dsn, "INSERT INTO pgq.key_raises (queue, dedupe_key, watermark, job_id, kind, payload, priority, "
                    "run_at, max_attempts) VALUES ('q', 'doc', 3, %s, 'k', '{}', 0, now(), 25)", [first])
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT input_watermark AS w FROM pgq.jobs WHERE status = 'queued'") == [{"w": 3}]


def test_neither_producer_nor_worker_may_write_raises(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        job = q.enqueue("k", queue="q", dedupe_key="doc", watermark=1)
        q.enqueue("k", queue="q", dedupe_key="doc", watermark=2)
    before = rows(roles.dsn, "SELECT * FROM pgq.key_raises ORDER BY id")
    assert len(before) == 1
    statements = ["INSERT INTO pgq.key_raises (queue, dedupe_key, watermark, job_id, kind, payload, priority, "
                  f"run_at, max_attempts) VALUES ('q', 'doc', 9, {job}, 'k', '{{}}', 0, now(), 25)",
                  "UPDATE pgq.key_raises SET watermark = 99",
                  "DELETE FROM pgq.key_raises",
                  "SELECT pgq.settle_raises(10)",
                  "SELECT pgq.key_raised('q', 'doc')"]
    _refused(roles.producer, statements)
    _refused(roles.worker, statements)
    assert rows(roles.dsn, "SELECT * FROM pgq.key_raises ORDER BY id") == before
    # The producer reads them, as it reads the jobs.
    assert len(rows(roles.producer, "SELECT * FROM pgq.key_raises")) == 1


def test_neither_producer_nor_worker_may_release_or_write_waits_and_only_the_worker_settles(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        parent = q.enqueue("k", queue="q")
        child = q.enqueue("k", queue="q", depends_on=[parent])
        q.cancel(parent)
    rows(roles.dsn, "UPDATE pgq.job_dependencies SET parent_outcome = NULL")  # as if unseen by the finish
    rows(roles.dsn, "UPDATE pgq.jobs SET status = 'waiting', finished_at = NULL, last_error = NULL "
                    "WHERE id = %s", [child])
    before = rows(roles.dsn, "SELECT id, status::text AS s FROM pgq.jobs ORDER BY id")
    statements = [f"SELECT pgq.after_finish(ARRAY[{parent}::bigint])",
                  f"SELECT pgq.release_children(ARRAY[{parent}::bigint])",
                  f"INSERT INTO pgq.awaited_jobs (job_id) VALUES ({child})",
                  "DELETE FROM pgq.awaited_jobs",
                  "SELECT * FROM pgq.complete_core(ARRAY[1::bigint], ARRAY[NULL::uuid], NULL, NULL, NULL, NULL)",
                  "SELECT * FROM pgq.fail_core(ARRAY[1::bigint], ARRAY[NULL::uuid], NULL, NULL, NULL, NULL, NULL)"]
    _refused(roles.producer, ["SELECT pgq.settle(10)", *statements])
    _refused(roles.worker, statements)
    assert rows(roles.dsn, "SELECT id, status::text AS s FROM pgq.jobs ORDER BY id") == before
    # The worker settles (each second, and in the rescue): only what is due.
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT status::text AS s FROM pgq.jobs WHERE id = %s", [child]) == [{"s": "cancelled"}]
