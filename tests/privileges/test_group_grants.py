"""Least privilege of revision 0014's objects: producers enqueue grouped jobs, workers set their
tasks' group limits and claim grouped jobs; neither calls the claim's internal helper, moves a
kind's turn, writes the group start windows, or removes limits."""

from __future__ import annotations

import pgq
from pgq.models import JobSpec

from .conftest import Roles
from .test_roles import assert_refused, refused, rows

HEADS = "SELECT pgq.claim_group_heads(ARRAY['q'], 'k', 'g', 0::smallint, 1, '{}', 'salt')"


def state(roles: Roles) -> list[list[dict[str, object]]]:
    """The rows of the tables these tests touch, read as the superuser."""
    return [rows(roles.dsn, f"SELECT * FROM pgq.{t} ORDER BY 1, 2")
            for t in ("jobs", "group_limits", "group_rate_starts")]


def test_producers_enqueue_grouped_jobs_and_nothing_else_of_groups(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as q:
        plain = q.enqueue("k", queue="q", group_key="g")  # the plain INSERT of a job's input columns
        keyed = q.enqueue_many([JobSpec("k", queue="q", group_key="g", dedupe_key="d"),  # pgq.enqueue_many
                                JobSpec("k", queue="q", group_key="h", dedupe_key="e")])
        after = q.enqueue("k", queue="q", group_key="g", depends_on=[plain])  # pgq.enqueue_after
        [sql] = rows(roles.producer, "SELECT pgq.enqueue('k', '{}', 'q', group_key => 'g') AS id")
        refused(lambda: q.set_group_limits("k", concurrency=1))
    assert rows(roles.dsn, "SELECT id, group_key FROM pgq.jobs ORDER BY id") == [
        {"id": i, "group_key": g} for i, g in zip([plain, *keyed, after, sql["id"]], "gghgg", strict=True)]
    rows(roles.dsn, "INSERT INTO pgq.group_limits (kind, max_running) VALUES ('k', 1)")
    before = state(roles)
    for statement in (
        HEADS,
        "INSERT INTO pgq.group_limits (kind, max_running) VALUES ('other', 1)",
        "UPDATE pgq.group_limits SET max_running = 5",
        "DELETE FROM pgq.group_limits",
        "INSERT INTO pgq.group_rate_starts VALUES ('k', 'g', now(), 1)",
        "UPDATE pgq.jobs SET group_key = 'other'",
    ):
        assert_refused(roles.producer, statement)
    assert state(roles) == before


def test_workers_set_group_limits_and_claim_but_cannot_bend_them(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as p:
        p.enqueue_many([JobSpec("k", queue="q", group_key="g") for _ in range(3)])
    with pgq.Queue(roles.worker) as w:
        w.set_group_limits("k", concurrency=2)  # a worker stores its tasks' limits at start
        w.set_group_limits("k", concurrency=1, rate="5/s")
        claims = w.claim(worker="w", queues=["q"], limit=10)
        assert [c.job.group_key for c in claims] == ["g"]  # the claim (a definer) walked, counted, wrote
        refused(lambda: w.set_group_limits("k"))  # removing limits stays with the admin
    before = state(roles)
    assert before[1][0]["turn_after"] == "g" and len(before[2]) == 1
    for statement in (
        HEADS,
        "UPDATE pgq.group_limits SET turn_after = 'z'",
        "DELETE FROM pgq.group_limits",
        "DELETE FROM pgq.group_rate_starts",
        "INSERT INTO pgq.group_rate_starts VALUES ('k', 'g', now(), 1)",
        "UPDATE pgq.jobs SET group_key = 'other'",
    ):
        assert_refused(roles.worker, statement)
    assert state(roles) == before
    with pgq.Queue(roles.admin) as a:
        a.set_group_limits("k")
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.group_limits") == [{"n": 0}]
