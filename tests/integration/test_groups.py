"""Group keys (revision 0014): every enqueue path stores them, per-group concurrency and rate limits
are exact under claimers racing from several connections, and the claim takes groups in turn."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pytest

import pgq
from pgq import InvalidJob, JobSpec, Queue
from pgq.tasks import follow_up_spec

from .. import history
from .conftest import SQL


def test_every_enqueue_path_stores_the_group_key(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    q = pgq_queue
    ids: dict[int, str | None] = {}
    ids[q.enqueue("k", group_key="one")] = "one"  # job_insert_one
    ids[q.enqueue("k", dedupe_key="d1", group_key="keyed-one")] = "keyed-one"  # job_enqueue_one
    for job_id, key in zip(q.enqueue_many([JobSpec("k", group_key="b1"), JobSpec("k"),  # job_insert
                                           JobSpec("k", group_key="b2")]), ["b1", None, "b2"], strict=True):
        ids[job_id] = key
    for job_id, key in zip(q.enqueue_many([JobSpec("k", dedupe_key="d2", group_key="kb"),  # job_enqueue
                                           JobSpec("k", dedupe_key="d3")]), ["kb", None], strict=True):
        ids[job_id] = key
    parent = next(iter(ids))
    ids[q.enqueue("k", depends_on=[parent], group_key="child")] = "child"  # job_enqueue_after
    [row] = db("SELECT pgq.enqueue('k', group_key => 'sql') AS id")  # the SQL API
    ids[row["id"]] = "sql"
    [row] = db("SELECT pgq.enqueue('k', '{}', 'default', 0, NULL, NULL, NULL, NULL, ARRAY[%s]::bigint[], "
               "'cancel', 'sql-after') AS id", [parent])
    ids[row["id"]] = "sql-after"

    app = pgq.App(pgq_dsn)

    @app.task(name="by_customer", group_by="customer_id")
    def by_customer(customer_id: int | str | None = None) -> None:
        """A grouped task."""

    try:
        ids[by_customer.defer(customer_id=42)] = "42"  # Task.defer: an int field as text
        ids[by_customer.defer()] = None  # no such field: no group
        ids[by_customer.configure(group_key="given").defer(customer_id=1)] = "given"
        ids[q.enqueue_many([by_customer.spec(customer_id="c7")])[0]] = "c7"  # Task.spec
        with Queue(pgq_dsn, app=app) as q_app:  # enqueue by name through an App's tasks
            ids[q_app.enqueue("by_customer", {"customer_id": "c8"})] = "c8"
        # after_success builds its job with follow_up_spec, then enqueues it like the others.
        follow = [follow_up_spec(by_customer, {"customer_id": 9}, {}, {}),
                  follow_up_spec("plain", None, {"group_key": "fu"}, {})]
        for job_id, key in zip(q.enqueue_many(follow), ["9", "fu"], strict=True):
            ids[job_id] = key
    finally:
        app.close()

    rows = db("SELECT id, group_key, limited FROM pgq.jobs ORDER BY id")
    assert {r["id"]: r["group_key"] for r in rows} == ids
    assert all(r["limited"] == (r["group_key"] is not None) for r in rows)  # grouped rows leave the fast path
    job = q.get(parent)
    assert job is not None and job.group_key == ids[parent]
    claimed = {c.id: c.job.group_key for c in q.claim(worker="w", limit=100)}
    assert claimed and all(claimed[i] == ids[i] for i in claimed)


@pytest.mark.parametrize("bad", ["", "a\x00b", 7])
def test_a_bad_group_key_is_refused_before_anything_is_written(pgq_queue: Queue, db: SQL, bad: Any) -> None:
    with pytest.raises(InvalidJob, match="group_key"):
        pgq_queue.enqueue("k", group_key=bad)
    with pytest.raises(InvalidJob, match="group_by"):
        pgq.models.group_key_from("f", {"f": [bad]})
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]
    with pytest.raises(psycopg.errors.CheckViolation):  # nor through SQL: an empty key, or an unmarked row
        db("INSERT INTO pgq.jobs (kind, group_key, limited) VALUES ('k', 'g', false)")
    for call in ("pgq.enqueue('k', group_key => '')",  # the SQL API says which argument, whichever path
                 "pgq.enqueue('k', group_key => '', dedupe_key => 'd', unique_for => '1 hour')",
                 "pgq.enqueue('k', group_key => '', sequence_key => 's')"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="group_key must not be empty"):
            db(f"SELECT {call}")
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_group_limits_are_set_replaced_and_removed(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.set_group_limits("k", concurrency=3)
    pgq_queue.set_group_limits("k", concurrency=2, rate="10/2s")
    assert db("SELECT max_running, max_starts, per_s FROM pgq.group_limits") == [
        {"max_running": 2, "max_starts": 10, "per_s": 2.0}]
    for bad in ({"concurrency": 0}, {"concurrency": True}, {"rate": "x/s"}):
        with pytest.raises(InvalidJob):
            pgq_queue.set_group_limits("k", **bad)
    pgq_queue.set_group_limits("k")
    assert db("SELECT count(*) AS n FROM pgq.group_limits") == [{"n": 0}]


def _race(pgq_dsn: str, db: SQL, claimers: int, hold_s: float, seconds: float = 30) -> None:
    """Run `claimers` threads, each on its own connection, claiming up to 5 jobs at a time, holding
    each claimed job `hold_s` (at random, up to), completing it, until no job is queued or running."""
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        rng = random.Random(n)
        try:
            with Queue(pgq_dsn, max_size=1) as queue:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    claims = queue.claim(worker=f"w{n}", limit=rng.randint(1, 5))
                    if claims:
                        time.sleep(rng.uniform(0, hold_s))
                        queue.complete_many([(c, None) for c in claims])
                    elif db("SELECT count(*) AS n FROM pgq.jobs WHERE status IN ('queued', 'running')") == [{"n": 0}]:
                        return
                    else:
                        time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 10)
    assert errors == []


@pytest.mark.slow
def test_racing_claimers_never_exceed_a_group_limit_and_lose_nothing(pgq_dsn: str, pgq_queue: Queue,
                                                                     db: SQL) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        history.install(conn)
    pgq_queue.set_group_limits("capped", concurrency=2)
    pgq_queue.set_group_limits("paced", rate=(3, 0.3))
    specs = [JobSpec("capped", {"i": i}, group_key=f"g{i % 4}") for i in range(60)]
    specs += [JobSpec("paced", {"i": i}, group_key=f"p{i % 3}") for i in range(18)]
    specs += [JobSpec("capped", {"i": i}) for i in range(10)]  # no group: no group limit
    # Grouped, without group limits: its group_limits row (no limits) only keeps the turn, and the
    # claimers racing for it do not wait for each other's hold of that row.
    specs += [JobSpec("free", {"i": i}, group_key=f"f{i % 5}") for i in range(30)]
    random.Random(7).shuffle(specs)
    pgq_queue.enqueue_many(specs)
    _race(pgq_dsn, db, claimers=6, hold_s=0.03)

    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        report = history.check(conn, effects=False)
    assert report.violations == {}, report.summary()
    assert db("SELECT status::text AS s, count(*) AS n FROM pgq.jobs GROUP BY 1") == [{"s": "succeeded", "n": 118}]
    assert report.counts["claim"] == 118  # each job ran once
    assert db("SELECT kind, max_running, max_starts FROM pgq.group_limits ORDER BY kind") == [
        {"kind": "capped", "max_running": 2, "max_starts": None},
        {"kind": "free", "max_running": None, "max_starts": None},
        {"kind": "paced", "max_running": None, "max_starts": 3}]
    # The limits were reached (the race was real): some claim found 2 of a group running.
    [reached] = db("SELECT max(running_of_group) AS m FROM history WHERE kind = 'capped'")
    assert reached["m"] == 2
    # 6 starts per group at 3 per 0.3 s: the first and the last start of a group are >= 0.3 s apart.
    spans = db("SELECT group_key, max(started_at) - min(started_at) AS span FROM history "
               "WHERE event = 'claim' AND kind = 'paced' GROUP BY 1")
    assert len(spans) == 3 and all(s["span"].total_seconds() >= 0.3 for s in spans)


def test_the_history_checker_finds_a_group_over_its_limits(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        history.install(conn)
    pgq_queue.enqueue_many([JobSpec("k", group_key="g") for _ in range(3)])
    pgq_queue.claim(worker="w", limit=3)  # no limit yet: all three run
    pgq_queue.set_group_limits("k", concurrency=2, rate=(2, 60))
    # A claim the limits did not stop (an UPDATE as the owner, as a broken claim would do).
    db("UPDATE pgq.jobs SET status = 'queued', lease_token = NULL, lease_expires_at = NULL, claimed_by = NULL "
       "WHERE id = (SELECT max(id) FROM pgq.jobs)")
    db("UPDATE pgq.jobs SET status = 'running', lease_token = gen_random_uuid(), attempts = attempts + 1, "
       "lease_expires_at = now() + interval '1 minute', started_at = clock_timestamp() "
       "WHERE id = (SELECT max(id) FROM pgq.jobs)")
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        report = history.check(conn, effects=False)
    assert set(report.violations) == {"a group concurrency limit was exceeded", "a group rate limit was exceeded"}


def test_a_claim_takes_groups_in_turn_within_a_priority(pgq_queue: Queue, db: SQL) -> None:
    q = pgq_queue
    q.set_group_limits("k", concurrency=100)  # a limit row: the walk remembers where it ended
    q.enqueue_many([JobSpec("k", {"i": i}, group_key=f"g{g:02}") for g in range(10) for i in range(5)])
    seen: list[str] = []
    for _ in range(5):  # 5 claims of 2 see each of the 10 groups once, in key order
        seen += [c.job.group_key or "" for c in q.claim(worker="w", limit=2)]
    assert seen == [f"g{g:02}" for g in range(10)]
    # Priority first: a better job of any group runs before every group's turn.
    [urgent] = q.enqueue_many([JobSpec("k", group_key="g05", priority=-1)])
    assert [c.id for c in q.claim(worker="w", limit=1)] == [urgent]
    # A group at its limit is passed over: the others keep their turns.
    q.set_group_limits("k", concurrency=1)
    db("UPDATE pgq.jobs SET status = 'succeeded', lease_token = NULL, lease_expires_at = NULL, finished_at = now() "
       "WHERE status = 'running' AND group_key <> 'g00'")
    got = sorted(c.job.group_key or "" for c in q.claim(worker="w", limit=20))
    assert got == [f"g{g:02}" for g in range(1, 10)]  # one each: g00 is running one already


def test_groups_of_a_kind_without_group_limits_take_turns_across_claims(pgq_queue: Queue, db: SQL) -> None:
    # 40 groups with a backlog of 30 jobs each, then one job of group zz, last in key order, and no
    # group limits: claims of 10 take one job per group in turn, so zz's job is claimed by the 5th
    # claim (41 groups). Before the claim kept the turn of such a kind, every claim started at the
    # first group, and zz waited for the whole backlog: 1,200 jobs, 121 claims.
    q = pgq_queue
    q.enqueue_many([JobSpec("k", {"i": i}, group_key=f"g{g:02}") for g in range(40) for i in range(30)])
    [late] = q.enqueue_many([JobSpec("k", group_key="zz")])
    rounds, ahead = 0, 0
    while True:
        rounds += 1
        claims = q.claim(worker="w", limit=10)
        if late in [c.id for c in claims]:
            break
        assert rounds < 10, f"{ahead + len(claims)} jobs of other groups were claimed first"
        ahead += len(claims)
        for c in claims:
            q.complete(c)
    assert (rounds, ahead) == (5, 40)
    # The kind got a group_limits row without limits, which keeps its turn: the 5th claim took zz,
    # then went round to g00 ... g08.
    assert db("SELECT max_running, max_starts, per_s, turn_after FROM pgq.group_limits WHERE kind = 'k'") == [
        {"max_running": None, "max_starts": None, "per_s": None, "turn_after": "g08"}]


def test_a_groups_jobs_at_several_priorities_share_its_limit(pgq_queue: Queue) -> None:
    pgq_queue.set_group_limits("m", concurrency=3)
    pgq_queue.enqueue_many([JobSpec("m", group_key="x", priority=p) for p in (0, 1, 2, 2, 2)]
                           + [JobSpec("m", group_key="y", priority=2) for _ in range(5)])
    claimed = pgq_queue.claim(worker="w", limit=20)
    assert sorted((c.job.group_key or "", c.job.priority) for c in claimed) == [
        ("x", 0), ("x", 1), ("x", 2), ("y", 2), ("y", 2), ("y", 2)]
    assert pgq_queue.claim(worker="w", limit=20) == []  # both groups are at their limit


@pytest.mark.slow
def test_one_groups_backlog_does_not_delay_another_groups_job(pgq_queue: Queue, db: SQL) -> None:
    # 100,000 jobs of group A, then 1 of group B (and plain jobs, one group of their own): B starts
    # in the first claim.
    db("INSERT INTO pgq.jobs (kind, queue, group_key, limited) "
       "SELECT 'k', 'default', 'A', true FROM generate_series(1, 100000)")
    db("INSERT INTO pgq.jobs (kind, queue) SELECT 'plain', 'default' FROM generate_series(1, 1000)")
    [late] = pgq_queue.enqueue_many([JobSpec("k", group_key="B")])
    db("ANALYZE pgq.jobs")
    started = time.perf_counter()
    claims = pgq_queue.claim(worker="w", limit=3)
    elapsed = time.perf_counter() - started
    assert sorted(c.job.group_key or "" for c in claims) == ["", "A", "B"]
    assert late in [c.id for c in claims]
    print(f"a claim of 3 with 100,000 jobs of A ahead of B: {elapsed * 1000:.1f} ms")
