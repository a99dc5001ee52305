"""A producer that sits in an open transaction after taking row locks (issue 30): pgq.enqueue_after with
every active job as a parent, pgq.mark_awaited, pgq.enqueue_many with a watermark on a queued key.
Workers go on claiming and acknowledging everything else, a worker's acknowledgement of a held row
comes back busy at once instead of waiting, an admin acts on the rows the producer does not hold, and
the bound documented in docs/operations.md (Threat model) holds: idle_in_transaction_session_timeout
on the producer's login ends the session, and then the held jobs finish and can be cancelled."""

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


def test_a_producer_holding_its_transaction_open_delays_only_the_rows_it_locked(roles: Roles) -> None:
    login = str(conninfo_to_dict(roles.producer)["user"])
    rows(roles.dsn, sql.SQL("ALTER ROLE {} SET idle_in_transaction_session_timeout = '5s'").format(
        sql.Identifier(login)).as_string(None))
    with pgq.Queue(roles.dsn) as q:
        parents = [q.enqueue("k", queue="q") for _ in range(4)]
        keyed = q.enqueue("k", queue="q", dedupe_key="key", watermark=1)
    with pgq.Queue(roles.worker) as w:
        running = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=2)}
    assert sorted(running) == parents[:2]
    active = [*parents, keyed]

    producer = psycopg.connect(roles.producer)  # not autocommit: the transaction stays open
    try:
        producer.execute("SELECT * FROM pgq.enqueue_after(ARRAY['child'], ARRAY['{}'::jsonb], ARRAY['c'], "
                         "NULL, NULL, NULL, NULL, NULL, %s, %s)", [[1] * len(active), active])
        producer.execute("SELECT * FROM pgq.mark_awaited(%s)", [parents[2]])
        producer.execute("SELECT * FROM pgq.enqueue_many(ARRAY['k'], NULL, ARRAY['q'], NULL, NULL, NULL, "
                         "ARRAY['key'], ARRAY[2::bigint], NULL)")
        pid = producer.info.backend_pid
        # Now idle in its transaction, holding those rows.
        with pgq.Queue(roles.dsn) as q:
            others = [q.enqueue("k", queue="q") for _ in range(3)]
            free = q.enqueue("k", queue="elsewhere")
        with pgq.Queue(roles.worker) as w:
            # Claims skip the held rows and take every other ready job.
            claimed = {c.id: c for c in w.claim(worker="w", queues=["q"], limit=10)}
        assert sorted(claimed) == others
        # The worker's own acknowledgements: the free rows go through, the held ones come back busy.
        busy: set[int] = set()
        done = _ack(roles.worker, _ops.complete([(c, None, None) for c in [*running.values(), *claimed.values()]],
                                                raise_lost=False, busy=busy))
        assert busy == set(running) and set(done) == set(claimed)
        with pgq.Queue(roles.admin) as a:
            assert a.cancel(free).status is JobStatus.CANCELLED
        # The bound: the producer's login is ended once idle in its transaction that long, which
        # releases its locks (and rolls its enqueues back).
        wait_for(lambda: not rows(roles.dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]), 60,
                 "the producer's idle transaction to be ended")
    finally:
        producer.close()
    busy = set()
    done = _ack(roles.worker, _ops.complete([(c, None, None) for c in running.values()], raise_lost=False, busy=busy))
    assert busy == set() and set(done) == set(running)
    with pgq.Queue(roles.admin) as a:
        assert a.cancel(parents[3]).status is JobStatus.CANCELLED
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs WHERE kind = 'child' OR input_watermark = 2") == [
        {"n": 0}]
