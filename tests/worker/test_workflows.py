"""Workflows with in-process workers against a real Postgres: follow-up jobs (`pgq.after_success`,
`on_success`, `on_failure`) and dependencies (`depends_on`, `on_parent_failure`)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import pgq
from pgq.errors import InvalidJob, PgqError

from .conftest import DB, run_worker_until


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an `async def` test in a fresh event loop (asyncio.run), as the other worker tests do."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def statuses(db: DB, ids: list[int]) -> list[str]:
    """The status of each job of `ids`, in that order."""
    found = {r["id"]: r["status"] for r in db.rows("SELECT id, status::text AS status FROM pgq.jobs "
                                                   "WHERE id = ANY(%s)", [ids])}
    return [found[i] for i in ids]


def follow_ups_of(db: DB, kind: str) -> list[dict[str, Any]]:
    """The jobs of `kind`, oldest first."""
    return db.rows("SELECT id, queue, payload, priority, dedupe_key, status::text AS status FROM pgq.jobs "
                   "WHERE kind = %s ORDER BY id", [kind])


@in_loop
async def test_after_success_enqueues_follow_ups_with_the_completion_and_only_then(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(queue="next", priority=3)
    def publish(n: int) -> None:
        return None

    @app.task(max_attempts=2, retry=pgq.Backoff(initial=0.05, min_delay=0.05, jitter=0))
    def step(n: int, fail: bool = False) -> int:
        pgq.after_success(publish, {"n": n})  # a Task: its queue and priority
        pgq.after_success("publish", {"n": n * 10}, priority=7)  # by name: the app's task of that name
        pgq.after_success("elsewhere", [n], queue="other", delay=60, dedupe_key=f"e:{n}")
        if fail:
            raise RuntimeError("no follow-ups from a failed attempt")
        return n

    async def done(q: pgq.AsyncQueue) -> bool:
        return db.value("SELECT count(*) FROM pgq.jobs WHERE kind = 'step' AND status IN ('queued', 'running')") == 0

    async def before(q: pgq.AsyncQueue) -> None:
        await q.enqueue_many([step.spec(n=1), step.spec(n=2, fail=True)])  # the task's max_attempts

    await run_worker_until(app, done, before=before, queues=["default"])
    assert [(r["payload"], r["queue"], r["priority"]) for r in follow_ups_of(db, "publish")] == [
        ({"n": 1}, "next", 3), ({"n": 10}, "next", 7)]
    [elsewhere] = follow_ups_of(db, "elsewhere")
    assert (elsewhere["payload"], elsewhere["queue"], elsewhere["dedupe_key"]) == ([1], "other", "e:1")
    assert db.value("SELECT status::text FROM pgq.jobs WHERE kind = 'step' AND payload->>'n' = '2'") == "failed"


@in_loop
async def test_bad_follow_ups_raise_in_the_handler_and_after_success_outside_a_handler_raises(
        pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    seen: list[str] = []

    @app.task
    def target(x: int) -> None:
        return None

    @app.task(max_attempts=1)
    def bad() -> None:
        for call in (lambda: pgq.after_success(target, {"y": 1}),
                     lambda: pgq.after_success(target, [1]),
                     lambda: pgq.after_success("k", {}, conn=None),
                     lambda: pgq.after_success("", {}),
                     lambda: pgq.after_success(42, {}),  # type: ignore[arg-type]
                     lambda: pgq.after_success("k", {}, depends_on=[1], dedupe_key="x")):
            try:
                call()
            except InvalidJob as exc:
                seen.append(str(exc))

    async def done(q: pgq.AsyncQueue) -> bool:
        return db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'succeeded'") == 1

    async def before(q: pgq.AsyncQueue) -> None:
        await q.enqueue("bad")

    await run_worker_until(app, done, before=before)
    assert len(seen) == 6, seen
    assert "unexpected" in seen[0] and "dict of keyword arguments" in seen[1] and "conn" in seen[2]
    assert db.value("SELECT count(*) FROM pgq.jobs") == 1  # nothing recorded from the bad calls
    with pytest.raises(PgqError, match="inside task handlers"):
        pgq.after_success("k")


@in_loop
async def test_no_follow_up_from_a_dirty_rerun_nor_from_a_cancelled_or_snoozed_attempt(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    gate = asyncio.Event()

    @app.task
    async def keyed(n: int) -> None:
        pgq.after_success("after_keyed", {"attempt": pgq.current_job().attempts,
                                          "watermark": pgq.current_job().input_watermark}, queue="later")
        if n == 1:
            await gate.wait()  # held until a newer watermark arrived: the completion re-queues it

    snoozed: list[int] = []

    @app.task
    async def snoozy() -> pgq.Snooze | None:
        pgq.after_success("after_snoozy", queue="later")
        if not snoozed:
            snoozed.append(pgq.current_job().id)
            return pgq.Snooze(0)
        return None

    @app.task
    async def doomed() -> None:
        pgq.after_success("after_doomed", queue="later")
        await asyncio.sleep(30)

    ids: dict[str, int] = {}

    async def before(q: pgq.AsyncQueue) -> None:
        ids["keyed"] = await q.enqueue("keyed", {"n": 1}, dedupe_key="k", watermark=1)
        ids["snoozy"] = await q.enqueue("snoozy")
        ids["doomed"] = await q.enqueue("doomed")

    async def done(q: pgq.AsyncQueue) -> bool:
        running = db.rows("SELECT kind FROM pgq.jobs WHERE status = 'running' ORDER BY kind")
        if "keyed" not in ids or [r["kind"] for r in running] != ["doomed", "keyed"]:
            return db.value("SELECT count(*) FROM pgq.jobs WHERE status IN ('queued', 'running') "
                            "AND kind IN ('keyed', 'snoozy', 'doomed')") == 0 and gate.is_set()
        if not gate.is_set():
            await q.enqueue("keyed", {"n": 1}, dedupe_key="k", watermark=2)  # the running job is dirty now
            await q.cancel(ids["doomed"])
            gate.set()
        return False

    await run_worker_until(app, done, before=before, queues=["default"])
    # The dirty completion enqueued nothing; the re-run (watermark 2) enqueued its follow-up.
    assert [r["payload"]["watermark"] for r in follow_ups_of(db, "after_keyed")] == [2]
    assert len(follow_ups_of(db, "after_snoozy")) == 1  # from the second run only
    assert follow_ups_of(db, "after_doomed") == []
    assert statuses(db, [ids["keyed"], ids["snoozy"], ids["doomed"]]) == ["succeeded", "succeeded", "cancelled"]


@in_loop
async def test_on_success_and_on_failure_run_once_with_the_outcome(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(queue="notes")
    def noted(job_id: int, result: Any = None, error: str | None = None) -> None:
        return None

    @app.task(on_success=noted, on_failure="noted", max_attempts=3,
              retry=pgq.Backoff(initial=0.05, min_delay=0.05, jitter=0))
    def flaky(ok: bool) -> dict[str, bool]:
        if not ok:
            raise ValueError("always fails")
        return {"ok": ok}

    ids: dict[str, int] = {}

    async def before(q: pgq.AsyncQueue) -> None:
        ids["ok"] = await flaky.defer_async(ok=True)
        ids["bad"] = await flaky.defer_async(ok=False)

    async def done(q: pgq.AsyncQueue) -> bool:
        return statuses(db, [ids["ok"], ids["bad"]]) == ["succeeded", "failed"] if ids else False

    await run_worker_until(app, done, before=before, queues=["default"])
    notes = follow_ups_of(db, "noted")
    assert [(n["queue"], n["payload"]) for n in notes] == [
        ("notes", {"job_id": ids["ok"], "result": {"ok": True}}),
        ("notes", {"job_id": ids["bad"], "error": "ValueError: always fails"}),
    ]  # one note for the failure, after the third attempt, none for the two retries
    assert db.value("SELECT attempts FROM pgq.jobs WHERE id = %s", [ids["bad"]]) == 3


def test_follow_up_tasks_must_take_the_follow_up_arguments() -> None:
    app = pgq.App("postgresql://nobody@127.0.0.1:1/never")

    @app.task
    def wrong(x: int) -> None:
        return None

    with pytest.raises(InvalidJob, match="on_success task 'wrong' must take the keyword arguments job_id, result"):
        app.task(on_success=wrong)(lambda: None)
    with pytest.raises(InvalidJob, match="on_failure must be a Task or a job kind"):
        app.task(name="t2", on_failure=3)(lambda: None)  # type: ignore[call-overload]


@in_loop
async def test_dependencies_run_children_after_their_parents_and_propagate_failure(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)

    @app.task(max_attempts=1)
    def node(name: str, fail: bool = False) -> str:
        db_conn = DB(pgq_dsn)
        try:
            db_conn.rows("INSERT INTO effects (job_id, kind, note) VALUES (%s, 'node', %s)",
                         [pgq.current_job().id, name])
        finally:
            db_conn.close()
        if fail:
            raise pgq.PermanentFailure(f"{name} fails")
        return name

    ids: dict[str, int] = {}

    async def before(q: pgq.AsyncQueue) -> None:
        ids["a"] = await q.enqueue("node", {"name": "a"}, delay=0.3)  # parents still queued at enqueue
        ids["b"] = await q.enqueue("node", {"name": "b"}, delay=0.3)
        ids["bad"] = await q.enqueue("node", {"name": "bad", "fail": True}, delay=0.3)
        ids["ab"] = await q.enqueue("node", {"name": "ab"}, depends_on=[ids["a"], ids["b"]])
        ids["diamond"] = await q.enqueue("node", {"name": "diamond"}, depends_on=[ids["ab"], ids["a"]])
        ids["doomed"] = await q.enqueue("node", {"name": "doomed"}, depends_on=[ids["a"], ids["bad"]])
        ids["doomed2"] = await q.enqueue("node", {"name": "doomed2"}, depends_on=[ids["doomed"]])
        ids["callback"] = await q.enqueue("node", {"name": "callback"}, depends_on=[ids["bad"], ids["diamond"]],
                                          on_parent_failure="run")
        assert db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'waiting'") == 5

    async def done(q: pgq.AsyncQueue) -> bool:
        return bool(ids) and db.value(
            "SELECT count(*) FROM pgq.jobs WHERE status IN ('waiting', 'queued', 'running')") == 0

    db.rows("CREATE TABLE IF NOT EXISTS effects (id bigserial PRIMARY KEY, job_id bigint NOT NULL, kind text NOT NULL, "
            "n integer, attempt integer, token uuid, pid integer, note text, "
            "at timestamptz NOT NULL DEFAULT clock_timestamp())")
    await run_worker_until(app, done, before=before, concurrency=4)
    order = [r["note"] for r in db.rows("SELECT note FROM effects ORDER BY at")]
    assert sorted(order) == ["a", "ab", "b", "bad", "callback", "diamond"]
    assert order.index("ab") > max(order.index("a"), order.index("b"))
    assert order.index("diamond") > order.index("ab")
    assert order.index("callback") > max(order.index("bad"), order.index("diamond"))
    jobs = {r["id"]: r for r in db.rows("SELECT id, status::text AS status, last_error, pending_parents "
                                        "FROM pgq.jobs")}
    assert jobs[ids["doomed"]]["status"] == "cancelled"
    assert jobs[ids["doomed"]]["last_error"] == f"parent job {ids['bad']} failed"
    assert jobs[ids["doomed2"]]["last_error"] == f"parent job {ids['doomed']} cancelled"
    assert [jobs[ids[k]]["status"] for k in ("ab", "diamond", "callback")] == ["succeeded"] * 3
    assert all(jobs[ids[k]]["pending_parents"] == 0 for k in ("ab", "diamond", "callback", "doomed2"))
    # A cancelled child keeps the count it had (docs/operations.md): `a` is counted off `doomed` only
    # when it finished before `bad` cancelled it, or in the same acknowledgement (same finished_at).
    a_at, bad_at = (db.value("SELECT finished_at FROM pgq.jobs WHERE id = %s", [ids[k]]) for k in ("a", "bad"))
    assert jobs[ids["doomed"]]["pending_parents"] == (0 if a_at <= bad_at else 1)
    # Every child started after each parent it depends on had finished (database clock).
    late = db.rows("""
        SELECT d.job_id, d.parent_id FROM pgq.job_dependencies d
        JOIN pgq.jobs c ON c.id = d.job_id JOIN pgq.jobs p ON p.id = d.parent_id
        WHERE c.started_at IS NOT NULL AND c.started_at < p.finished_at""")
    assert late == []


@in_loop
async def test_enqueue_with_dependencies_validates_and_writes_nothing_on_error(pgq_dsn: str, db: DB) -> None:
    async with pgq.AsyncQueue(pgq_dsn) as q:
        parent = await q.enqueue("p")
        with pytest.raises(InvalidJob, match="there is no job 999999"):
            await q.enqueue_many([pgq.JobSpec("c", depends_on=[parent]), pgq.JobSpec("c", depends_on=[999999])])
        with pytest.raises(InvalidJob, match="cannot be combined"):
            await q.enqueue("c", depends_on=[parent], dedupe_key="k")
        assert db.value("SELECT count(*) FROM pgq.jobs") == 1
        # A batch mixing dependencies and dedupe keys: one transaction, ids in input order.
        ids = await q.enqueue_many([pgq.JobSpec("c", depends_on=[parent]), pgq.JobSpec("k", dedupe_key="x"),
                                    pgq.JobSpec("c"), pgq.JobSpec("k", dedupe_key="x")])
        assert ids[1] == ids[3] and len(set(ids)) == 3
        assert statuses(db, ids[:3]) == ["waiting", "queued", "queued"]
        # Parents that already finished: a child of a cancelled one is created cancelled.
        await q.cancel(parent)
        late = await q.enqueue("c", depends_on=[parent])
        assert statuses(db, [ids[0], late]) == ["cancelled", "cancelled"]
        # A waiting job can be awaited: the wait ends when it is cancelled.
        grand = await q.enqueue("c", depends_on=[ids[2]])
        waiter = asyncio.create_task(q.wait(grand, timeout=10))
        await asyncio.sleep(0.2)
        await q.cancel(grand)
        job = await waiter
        assert job.status is pgq.JobStatus.CANCELLED
        assert (await q.get(grand)) is not None
        assert dt.timedelta(0) <= job.finished_at - job.created_at  # type: ignore[operator]


def test_purge_takes_a_purged_childs_dependencies_along_and_jobs_can_be_truncated(pgq_dsn: str, db: DB) -> None:
    with pgq.Queue(pgq_dsn) as q:
        parent = q.enqueue("p")
        child = q.enqueue("c", depends_on=[parent])
        q.cancel(parent)  # the child is cancelled with it: both finished
        other_parent = q.enqueue("p")
        waiting = q.enqueue("c", depends_on=[other_parent, parent])  # created cancelled: parent cancelled
        assert statuses(db, [child, waiting]) == ["cancelled", "cancelled"]
        kept = q.enqueue("c", depends_on=[other_parent], on_parent_failure="run")
        assert q.purge(dt.timedelta(0)) == 3  # parent, child and waiting; other_parent and kept stay
    assert db.rows("SELECT job_id, parent_id FROM pgq.job_dependencies") == [
        {"job_id": kept, "parent_id": other_parent}]
    db.rows("TRUNCATE pgq.jobs")  # no foreign key stands in the way (test suites and benchmarks do this)
