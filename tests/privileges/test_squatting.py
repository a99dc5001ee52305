"""Nothing squattable (issue 40, finding 4; finding 8's unique slots): no lock that pgq's correctness
or liveness depends on can be taken by a role without pgq rights, and no application's own advisory
locks hide a job. A LOGIN role with no pgq rights (CONNECT only, which PUBLIC has by default) holds
every advisory key pgq used up to revision 0018, with session locks, while pgq goes on: claims get
every job, each maintenance step elects its leader, unique enqueues do not wait. And one producer's
open transaction holds only its own dedupe keys, never a slot other keys share."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgq
from pgq import JobSpec
from pgq.worker.maintenance import PeriodicEnqueuer, Rescuer, Retention

from .conftest import Roles
from .test_roles import rows

# The advisory keys of revisions up to 0018: the claim's reservations (class, id % 2^31), the settle,
# the 256 slots of pgq.enqueue_unique, and the leaders of rescue, periodic enqueue and retention.
OLD_CLAIM_CLASS = 1885827427
OLD_SETTLE_KEY = 1885827428
OLD_UNIQUE_CLASS = 1885827429
OLD_LEADER_KEYS = (0x7067_713A_7265_7363, 0x7067_713A_7065_7269, 0x7067_713A_7265_746E)


@pytest.fixture
def outsider(roles: Roles) -> Iterator[psycopg.Connection[Any]]:
    """A session of a LOGIN role with no pgq rights, in autocommit (its session locks outlive statements)."""
    name = f"{roles.names.producer[:-len('producer')]}x"
    password = secrets.token_hex(16)
    with psycopg.connect(roles.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password)))
    try:
        dsn = psycopg.conninfo.make_conninfo(roles.dsn, user=name, password=password)
        with psycopg.connect(dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM pgq.jobs")
            yield conn
    finally:
        with psycopg.connect(roles.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _hold_old_claim_keys(outsider: psycopg.Connection[Any], ids: list[int]) -> None:
    for job_id in ids:
        outsider.execute("SELECT pg_advisory_lock(%s, (%s::bigint %% 2147483648)::integer)", (OLD_CLAIM_CLASS, job_id))


@pytest.mark.parametrize("shape", ["plain", "limited", "grouped"])
def test_an_outsider_holding_the_claim_keys_hides_no_job(
    roles: Roles, outsider: psycopg.Connection[Any], shape: str,
) -> None:
    if shape == "limited":
        rows(roles.dsn, "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('k', 100)")
    with pgq.Queue(roles.producer) as producer:
        ids = producer.enqueue_many([JobSpec("k", {"i": i}, queue="q", group_key="g" if shape == "grouped" else None)
                                     for i in range(20)])
    _hold_old_claim_keys(outsider, ids)
    with pgq.Queue(roles.worker) as worker:
        claimed = worker.claim(worker="w", queues=["q"], limit=20, lease=60)
    assert sorted(c.id for c in claimed) == sorted(ids)


def test_an_outsider_holding_the_old_leader_keys_stops_no_maintenance_step(
    roles: Roles, outsider: psycopg.Connection[Any],
) -> None:
    for key in (*OLD_LEADER_KEYS, OLD_SETTLE_KEY):
        outsider.execute("SELECT pg_advisory_lock(%s)", (key,))
    app = pgq.App(roles.worker)
    app.periodic(every=1)(lambda: None)

    async def main() -> list[bool]:
        async with pgq.AsyncQueue(roles.worker) as queue, pgq.AsyncQueue(roles.admin) as admin:
            return [(await Rescuer(queue).run_once()).leader,
                    (await PeriodicEnqueuer(queue, app.periodic_tasks).run_once()).leader,
                    (await Retention(admin, 60).run_once()).leader]

    assert asyncio.run(main()) == [True, True, True]
    # A wait on a job that is gone: what the settle tidies up (and counts) when it runs.
    rows(roles.dsn, "INSERT INTO pgq.awaited_jobs (job_id) VALUES (123456789)")
    assert rows(roles.worker, "SELECT pgq.settle(10) AS n") == [{"n": 1}]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.awaited_jobs") == [{"n": 0}]


def test_an_outsider_holding_every_old_unique_slot_blocks_no_unique_enqueue(
    roles: Roles, outsider: psycopg.Connection[Any],
) -> None:
    outsider.execute("SELECT pg_advisory_lock(%s, s) FROM generate_series(0, 255) AS s", (OLD_UNIQUE_CLASS,))
    with psycopg.connect(roles.producer, autocommit=True, options="-c lock_timeout=2000") as conn:
        got = conn.execute("SELECT pgq.enqueue('k', dedupe_key => 'u', on_conflict => 'replace') AS id").fetchone()
    assert got is not None and got[0] > 0


def test_an_open_unique_enqueue_holds_its_own_key_only(roles: Roles) -> None:
    # Another key on the slot 'a' hashed onto (revision 0018's 256 slots).
    [other] = rows(roles.dsn, "SELECT k FROM (SELECT 'b' || n AS k FROM generate_series(1, 100000) AS n) x "
                              "WHERE hashtext('default' || chr(31) || k) & 255 "
                              "    = hashtext('default' || chr(31) || 'a') & 255 LIMIT 1")
    enqueue = "SELECT pgq.enqueue('k', dedupe_key => %s, unique_for => interval '1 hour') AS id"
    with psycopg.connect(roles.producer) as holder:
        holder.execute(enqueue, ("a",))  # the transaction stays open
        with psycopg.connect(roles.producer, autocommit=True, options="-c lock_timeout=2000") as conn:
            got = conn.execute(enqueue, (other["k"],)).fetchone()
            assert got is not None and got[0] > 0
            with pytest.raises(psycopg.errors.LockNotAvailable):  # its own key waits for the holder
                conn.execute(enqueue, ("a",))
        holder.commit()
    assert rows(roles.dsn, "SELECT dedupe_key FROM pgq.jobs ORDER BY id") == [{"dedupe_key": "a"},
                                                                             {"dedupe_key": other["k"]}]


def test_an_outsider_holding_guessable_queue_keys_keeps_no_claim_off_the_lone_path(
    roles: Roles, outsider: psycopg.Connection[Any],
) -> None:
    """Revision 0024: a claim locks rows directly (no reservation, up to 1,024 rows a statement)
    while it holds its queue's key, which derives from pgq.claim_secret. An outsider holding every
    key it can derive without the secret (the md5 of the queue's name, with and without the claim's
    '/queue/' prefix, each also with its lowest bit flipped) keeps no claim off that path: one
    statement of the worker takes 1,024 of 1,500 jobs, where a reserving claim takes at most 256."""
    with pgq.Queue(roles.producer) as producer:
        ids = producer.enqueue_many([JobSpec("k", {"i": i}, queue="q") for i in range(1500)])
    for text in ("q", "/queue/q", ":/queue/q"):
        key = int(hashlib.md5(text.encode()).hexdigest()[:16], 16)
        key -= 1 << 64 if key >= 1 << 63 else 0
        for k in (key, key ^ 1):
            outsider.execute("SELECT pg_advisory_lock(%s)", (k,))
    with psycopg.connect(roles.worker, autocommit=True) as conn:
        got = [r[0] for r in conn.execute("SELECT c.id FROM pgq.claim(ARRAY['q'], NULL, 5000, 60, 'w') AS c")]
    assert got == ids[:1024]
