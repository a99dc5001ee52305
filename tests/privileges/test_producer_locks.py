"""A producer that sits in an open transaction after calling the functions of its grant (issue 30).

pgq.enqueue_after (every active job as a parent) and pgq.mark_awaited hold nothing a worker or an
admin waits for (revision 0012): the parents are claimed, acknowledged and cancelled while the
producer's transaction is open, and what their finish could not see (the edges and the wait that
commit later) is settled by the rescue. pgq.enqueue_many with a watermark on an active key still
locks that key's job until the producer ends: a worker's acknowledgement of it comes back busy at
once instead of waiting, everything else goes on, and idle_in_transaction_session_timeout on the
producer's login (docs/operations.md, Threat model) bounds the hold."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import pgq
from pgq import _ops
from pgq.models import JobStatus

from ..worker.conftest import wait_for
from .conftest import Roles
from .test_roles import rows


def _ack(dsn: str, op: _ops.Operation[Any]) -> Any:
    """Run a worker's acknowledgement as the worker process does (its own transaction), in a session
    with no lock_timeout of its own: only pgq's guard keeps it from waiting."""
    with psycopg.connect(dsn, autocommit=True, options="-c lock_timeout=0") as conn:
        return _ops.run_sync(conn, op, own_transaction=True)


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


def test_a_watermark_enqueue_held_open_delays_only_its_keys_job_and_the_session_timeout_ends_it(
    roles: Roles,
) -> None:
    login = str(conninfo_to_dict(roles.producer)["user"])
    rows(roles.dsn, sql.SQL("ALTER ROLE {} SET idle_in_transaction_session_timeout = '5s'").format(
        sql.Identifier(login)).as_string(None))
    with pgq.Queue(roles.dsn) as q:
        keyed = q.enqueue("k", queue="q", dedupe_key="key", watermark=1)
        other = q.enqueue("k", queue="q")
    with pgq.Queue(roles.worker) as w:
        running = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=2)}
    assert sorted(running) == [keyed, other]

    producer = psycopg.connect(roles.producer)  # not autocommit: the transaction stays open
    try:
        producer.execute("SELECT * FROM pgq.enqueue_many(ARRAY['k'], NULL, ARRAY['q'], NULL, NULL, NULL, "
                         "ARRAY['key'], ARRAY[2::bigint], NULL)")
        pid = producer.info.backend_pid
        with pgq.Queue(roles.dsn) as q:
            free = q.enqueue("k", queue="elsewhere")
        # The worker's own acknowledgements: the free row goes through, the held one comes back busy.
        busy: set[int] = set()
        done = _ack(roles.worker, _ops.complete([(c, None, None) for c in running.values()],
                                                raise_lost=False, busy=busy))
        assert busy == {keyed} and set(done) == {other}
        with pgq.Queue(roles.admin) as a:
            assert a.cancel(free).status is JobStatus.CANCELLED
        # The bound: the producer's login is ended once idle in its transaction that long, which
        # releases its locks (and rolls its enqueue back).
        wait_for(lambda: not rows(roles.dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]), 60,
                 "the producer's idle transaction to be ended")
    finally:
        producer.close()
    busy = set()
    done = _ack(roles.worker, _ops.complete([(running[keyed], None, None)], raise_lost=False, busy=busy))
    assert busy == set() and set(done) == {keyed}
    assert rows(roles.dsn, "SELECT input_watermark AS w FROM pgq.jobs WHERE id = %s", [keyed]) == [{"w": 1}]


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
    for login, refused in ((roles.producer, ["SELECT pgq.settle(10)", *statements]), (roles.worker, statements)):
        for statement in refused:
            with psycopg.connect(login, autocommit=True) as conn:
                try:
                    conn.execute(statement)
                except psycopg.errors.InsufficientPrivilege:
                    continue
            raise AssertionError(f"{statement!r} went through as {login}")
    assert rows(roles.dsn, "SELECT id, status::text AS s FROM pgq.jobs ORDER BY id") == before
    # The worker settles (each second, and in the rescue): only what is due.
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT status::text AS s FROM pgq.jobs WHERE id = %s", [child]) == [{"s": "cancelled"}]
