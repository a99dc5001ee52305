"""`Queue.explain` / pgq.explain(id) (issue 33): one test per reason, each against a real setup of
the state it names, and the SQL function's answer is the client's."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from pathlib import Path

import pytest

from pgq import AsyncQueue, InvalidJob, NotFound, Queue
from pgq.insight import REASONS

from .conftest import SQL


def register(db: SQL, name: str = "w", *, queues: list[str] | None = None, kinds: tuple[str, ...] = ("k",)) -> None:
    """A live worker in the registry, claiming from `queues` (None: all) with handlers for `kinds`."""
    db("SELECT * FROM pgq.worker_register(%s, 'h', 1, %s, %s, 4, 30, 15, 't')", [name, queues, list(kinds)])


def test_scheduled_job_says_when(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    job_id = pgq_queue.enqueue("k", queue="q", delay=dt.timedelta(hours=1))
    e = pgq_queue.explain(job_id)
    [run_at] = db("SELECT run_at FROM pgq.jobs WHERE id = %s", [job_id])
    assert (e.status.value, e.codes) == ("queued", ("scheduled",))
    assert dt.datetime.fromisoformat(e.reasons[0].facts["run_at"]) == run_at["run_at"]


def test_paused_queue_says_by_whom_and_since_when(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    job_id = pgq_queue.enqueue("k", queue="q")
    assert pgq_queue.pause("q")
    e = pgq_queue.explain(job_id)
    [paused] = db("SELECT paused_by, paused_at FROM pgq.paused_queues WHERE queue = 'q'")
    assert e.codes == ("queue_paused",)
    facts = e.reasons[0].facts
    assert (facts["queue"], facts["paused_by"]) == ("q", paused["paused_by"])
    assert dt.datetime.fromisoformat(facts["paused_at"]) == paused["paused_at"]
    pgq_queue.resume("q")
    assert pgq_queue.explain(job_id).codes == ("ready",)


def test_full_concurrency_limit_names_the_running_jobs_holding_it(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    pgq_queue.set_concurrency_limit("k", 2)
    first, second, waiting = (pgq_queue.enqueue("k", queue="q") for _ in range(3))
    claimed = pgq_queue.claim(worker="w", queues=["q"], limit=5)
    assert sorted(c.id for c in claimed) == [first, second]
    e = pgq_queue.explain(waiting)
    assert e.codes == ("concurrency_limit_full",)
    assert e.reasons[0].facts == {"kind": "k", "max_running": 2, "running": 2, "holders": [first, second]}
    pgq_queue.complete(claimed[0])
    assert pgq_queue.explain(waiting).codes == ("ready",)


def test_full_rate_window_says_until_when(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    pgq_queue.set_rate_limit("k", "2/h")
    pgq_queue.enqueue("k", queue="q")
    assert len(pgq_queue.claim(worker="w", queues=["q"])) == 1
    pgq_queue.enqueue("k", queue="q")
    assert len(pgq_queue.claim(worker="w", queues=["q"])) == 1
    held = pgq_queue.enqueue("k", queue="q")
    assert pgq_queue.claim(worker="w", queues=["q"]) == []
    e = pgq_queue.explain(held)
    assert e.codes == ("rate_limit_full",)
    starts = [r["at"] for r in db("SELECT at FROM pgq.rate_limit_starts WHERE kind = 'k' ORDER BY at")]
    assert len(starts) == 2
    facts = e.reasons[0].facts
    # Room again once the oldest start leaves the hour.
    assert (facts["max_starts"], facts["starts"]) == (2, 2)
    assert dt.datetime.fromisoformat(facts["until"]) == starts[0] + dt.timedelta(hours=1)


def test_full_group_concurrency_limit_names_its_group_and_the_jobs_holding_it(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    pgq_queue.set_group_limits("k", concurrency=1)
    holder = pgq_queue.enqueue("k", queue="q", group_key="acct-1")
    held = pgq_queue.enqueue("k", queue="q", group_key="acct-1")
    [claim] = pgq_queue.claim(worker="w", queues=["q"], limit=5)
    assert claim.id == holder
    other_group = pgq_queue.enqueue("k", queue="q", group_key="acct-2")
    ungrouped = pgq_queue.enqueue("k", queue="q")  # group limits do not apply to it
    e = pgq_queue.explain(held)
    assert e.codes == ("group_concurrency_limit_full",)
    assert e.reasons[0].facts == {"kind": "k", "group_key": "acct-1", "max_running": 1, "running": 1,
                                  "holders": [holder]}
    assert [pgq_queue.explain(i).codes for i in (other_group, ungrouped)] == [("ready",), ("ready",)]
    # The claim agrees: it takes the other two and leaves the held job.
    assert sorted(c.id for c in pgq_queue.claim(worker="w", queues=["q"], limit=5)) == [other_group, ungrouped]
    pgq_queue.complete(claim)
    assert pgq_queue.explain(held).codes == ("ready",)
    assert [c.id for c in pgq_queue.claim(worker="w", queues=["q"], limit=5)] == [held]


def test_full_group_rate_window_says_which_group_and_until_when(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    pgq_queue.set_group_limits("k", rate="2/h")
    for _ in range(2):
        pgq_queue.enqueue("k", queue="q", group_key="acct-1")
        assert len(pgq_queue.claim(worker="w", queues=["q"])) == 1
    held = pgq_queue.enqueue("k", queue="q", group_key="acct-1")
    assert pgq_queue.claim(worker="w", queues=["q"]) == []
    e = pgq_queue.explain(held)
    assert e.codes == ("group_rate_limit_full",)
    starts = [r["at"] for r in db("SELECT at FROM pgq.group_rate_starts WHERE kind = 'k' AND group_key = 'acct-1' "
                                  "ORDER BY at")]
    assert len(starts) == 2
    facts = e.reasons[0].facts
    assert (facts["group_key"], facts["max_starts"], facts["per_s"], facts["starts"]) == ("acct-1", 2, 3600, 2)
    # Room again once the oldest start leaves the hour.
    assert dt.datetime.fromisoformat(facts["until"]) == starts[0] + dt.timedelta(hours=1)
    other_group = pgq_queue.enqueue("k", queue="q", group_key="acct-2")
    assert pgq_queue.explain(other_group).codes == ("ready",)
    assert [c.id for c in pgq_queue.claim(worker="w", queues=["q"])] == [other_group]


def test_waiting_job_names_its_unfinished_parents(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    a, b = pgq_queue.enqueue("k", queue="q"), pgq_queue.enqueue("k", queue="q")
    child = pgq_queue.enqueue("k", queue="q", depends_on=[a, b])
    e = pgq_queue.explain(child)
    assert (e.status.value, e.codes) == ("waiting", ("waiting_for_parents",))
    assert e.reasons[0].facts == {"parents": [a, b], "pending_parents": 2}
    claims = pgq_queue.claim(worker="w", queues=["q"], limit=2)
    pgq_queue.complete(next(c for c in claims if c.id == a))
    assert pgq_queue.explain(child).reasons[0].facts == {"parents": [b], "pending_parents": 1}


def test_no_live_worker_serves_the_queue(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    assert pgq_queue.explain(job_id).codes == ("no_live_worker",)
    register(db, "elsewhere", queues=["other"])
    register(db, "stale")
    register(db, "leaving")
    db("UPDATE pgq.workers SET last_seen = now() - interval '1 hour' WHERE claimed_by = 'stale'")
    db("UPDATE pgq.workers SET state = 'draining' WHERE claimed_by = 'leaving'")
    assert pgq_queue.explain(job_id).codes == ("no_live_worker",)
    register(db, "here", queues=["q"])
    assert pgq_queue.explain(job_id).codes == ("ready",)


def test_no_live_worker_serving_the_queue_knows_the_kind(pgq_queue: Queue, db: SQL) -> None:
    register(db, "w1", queues=["q"], kinds=("a", "b"))
    register(db, "w2", kinds=("c",))
    register(db, "w3", queues=["other"], kinds=("k",))
    job_id = pgq_queue.enqueue("k", queue="q")
    e = pgq_queue.explain(job_id)
    assert e.codes == ("unknown_kind",)
    assert e.reasons[0].facts == {"queue": "q", "kind": "k", "workers": ["w1", "w2"]}


def test_ready_job_has_its_position_in_claim_order(pgq_queue: Queue, db: SQL) -> None:
    register(db)
    first = pgq_queue.enqueue("k", queue="q")
    second = pgq_queue.enqueue("k", queue="q")
    pgq_queue.enqueue("k", queue="other")
    pgq_queue.enqueue("k", queue="q", delay=3600)  # not due: not ahead of anyone
    urgent = pgq_queue.enqueue("k", queue="q", priority=-1)
    positions = {i: pgq_queue.explain(i).reasons[0].facts["position"] for i in (urgent, first, second)}
    assert positions == {urgent: 1, first: 2, second: 3}


def test_running_and_finished_jobs_say_so(pgq_queue: Queue, db: SQL) -> None:
    ok, bad, gone = (pgq_queue.enqueue("k", queue="q", max_attempts=1) for _ in range(3))
    claims = {c.id: c for c in pgq_queue.claim(worker="w-run", queues=["q"], limit=2)}
    e = pgq_queue.explain(ok)
    assert (e.status.value, e.codes) == ("running", ("running",))
    assert e.reasons[0].facts["claimed_by"] == "w-run"
    pgq_queue.complete(claims[ok])
    pgq_queue.fail(claims[bad], "ValueError: nope\ntraceback")
    pgq_queue.cancel(gone)
    for job_id, status in ((ok, "succeeded"), (bad, "failed"), (gone, "cancelled")):
        e = pgq_queue.explain(job_id)
        assert (e.status.value, e.codes, e.reasons[0].facts["status"]) == (status, ("finished",), status)
    assert pgq_queue.explain(bad).reasons[0].detail.endswith("after 1 attempt(s): ValueError: nope")


def test_sql_function_gives_the_clients_answer_and_unknown_ids_raise(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q", delay=60)
    pgq_queue.pause("q")
    rows = db("SELECT reason, detail, facts FROM pgq.explain(%s)", [job_id])
    e = pgq_queue.explain(job_id)
    assert [(r["reason"], r["detail"], r["facts"]) for r in rows] == [(r.code, r.detail, r.facts) for r in e.reasons]
    assert e.codes == ("scheduled", "queue_paused", "no_live_worker")
    assert db("SELECT * FROM pgq.explain(0)") == []
    with pytest.raises(NotFound):
        pgq_queue.explain(123456789)
    with pytest.raises(InvalidJob):
        pgq_queue.explain("1")  # type: ignore[arg-type]


def test_async_explain_and_workers(pgq_dsn: str, db: SQL) -> None:
    register(db, "async-w")

    async def read() -> tuple[tuple[str, ...], list[str]]:
        async with AsyncQueue(pgq_dsn) as q:
            job_id = await q.enqueue("k", queue="q")
            return (await q.explain(job_id)).codes, [w.claimed_by for w in await q.workers()]

    assert asyncio.run(read()) == (("ready",), ["async-w"])


def test_every_reason_code_of_the_function_is_known_and_documented(db: SQL) -> None:
    [row] = db("SELECT pg_get_functiondef('pgq.explain(bigint)'::regprocedure) AS body")
    branches = re.findall(r"SELECT (\d+)(?: AS ord)?, '(\w+)'", row["body"])
    assert tuple(code for _, code in sorted(branches, key=lambda b: int(b[0]))) == REASONS
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = page.split("## Why is this job not running?", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"^\| `(\w+)` \|", section, flags=re.M)) == REASONS
