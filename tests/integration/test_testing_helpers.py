"""pgq.testing's helpers for the tests of applications: `drain` runs what is ready inline through
pgq's own claim and acknowledgement statements; `enqueued` and the assertions read what waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import pgq
from pgq.testing import DRAIN_WORKER, assert_enqueued, assert_not_enqueued, drain, enqueued
from tests.conftest import SQL


def test_drain_runs_ready_jobs_follow_ups_and_released_dependents(pgq_dsn: str, db: SQL) -> None:
    app = pgq.App(pgq_dsn)
    seen: list[tuple[str, Any]] = []

    @app.task
    def notify(job_id: int, result: Any) -> None:
        seen.append(("notify", result))

    @app.task(on_success=notify)
    def resize(image: int) -> dict[str, int]:
        job = pgq.current_job()
        assert job.claimed_by == DRAIN_WORKER
        pgq.set_progress({"done": 1})
        pgq.after_success("archive", {"image": image})
        return {"image": image, "width": 10}

    @app.task
    async def archive(image: int) -> str:
        seen.append(("archive", pgq.current_job().payload))
        await (await app.async_queue()).enqueue("publish", {"image": image})  # the drain's own AsyncQueue
        return "archived"

    @app.task
    def publish(image: int) -> None:
        seen.append(("publish", image))

    @app.task
    def elsewhere() -> None:
        raise AssertionError("a job of a queue the drain does not serve ran")

    try:
        first = resize.defer(image=7)
        waiting = app.queue.enqueue("publish", {"image": 8}, depends_on=[first])
        later = publish.configure(delay=3600).defer(image=9)
        other = elsewhere.configure(queue="other").defer()
        unknown = app.queue.enqueue("no_such_task", {"x": 1})

        ran = drain(app, pgq_dsn, queues=["default"])

        # resize; then, in id order, the dependent it released, its after_success and on_success jobs
        # (enqueued in its completion's transaction, in that order); then what archive enqueued.
        assert [(j.kind, j.status) for j in ran] == [
            ("resize", pgq.JobStatus.SUCCEEDED), ("publish", pgq.JobStatus.SUCCEEDED),
            ("archive", pgq.JobStatus.SUCCEEDED), ("notify", pgq.JobStatus.SUCCEEDED),
            ("publish", pgq.JobStatus.SUCCEEDED),
        ]
        assert ran[0].id == first and ran[1].id == waiting
        assert ran[0].result == {"image": 7, "width": 10} and ran[0].progress == {"done": 1}
        assert ran[2].result == "archived"
        assert seen == [("publish", 8), ("archive", {"image": 7}), ("notify", {"image": 7, "width": 10}),
                        ("publish", 7)]
        rows = db("SELECT id, status::text, claimed_by, attempts FROM pgq.jobs ORDER BY id")
        assert {r["id"]: r["status"] for r in rows if r["status"] != "succeeded"} == {
            later: "queued", other: "queued", unknown: "queued"}
        assert all(r["claimed_by"] == DRAIN_WORKER and r["attempts"] == 1 for r in rows if r["status"] == "succeeded")

        assert drain(app, app.queue, queues=["default"]) == []  # nothing ready is left there

        # A job that snoozes at once is ready again at once: max_jobs bounds the drain.
        @app.task
        def again() -> pgq.Snooze:
            return pgq.Snooze(0)

        looping = again.defer()
        bounded = drain(app, app.queue, queues=["default"], max_jobs=3)
        assert [(j.id, j.status, j.attempts) for j in bounded] == [(looping, pgq.JobStatus.QUEUED, 0)] * 3
    finally:
        app.close()


def test_drain_raises_a_handler_error_once_its_failure_is_recorded(pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)
    reported: list[dict[str, Any]] = []

    @app.task
    def report(job_id: int, error: str) -> None:
        reported.append({"job_id": job_id, "error": error})

    @app.task(max_attempts=1, on_failure=report)
    def charge(amount: int) -> None:
        raise ValueError(f"card declined for {amount}")

    @app.task(max_attempts=3)
    def flaky() -> None:
        raise RuntimeError("try later")

    @app.task
    def typed(n: int) -> int:
        return n

    @app.task(timeout=0.05, max_attempts=1)
    async def slow() -> None:
        await asyncio.sleep(30)

    try:
        charged = charge.defer(amount=5)
        with pytest.raises(ValueError, match="card declined for 5") as info:
            drain(app, app.queue)
        note = f"job {charged} charge attempt 1/1 failed (ValueError: card declined for 5); the job is now failed"
        assert any(note in n for n in info.value.__notes__)
        job = app.queue.get(charged)
        assert job is not None and job.status is pgq.JobStatus.FAILED
        assert job.last_error is not None and job.last_error.startswith("ValueError: card declined for 5")

        # The on_failure job was enqueued with the failure; the next drain runs it.
        assert [j.kind for j in drain(app, app.queue)] == ["report"]
        assert reported == [{"job_id": charged, "error": "ValueError: card declined for 5"}]

        flaked = flaky.defer()
        with pytest.raises(RuntimeError, match="try later"):
            drain(app, app.queue)
        job = app.queue.get(flaked)
        assert job is not None and (job.status, job.attempts) == (pgq.JobStatus.QUEUED, 1)
        assert drain(app, app.queue) == []  # its retry is not due yet

        bad = app.queue.enqueue("typed", {"n": 1, "extra": 2})  # does not fit the handler: rejected
        with pytest.raises(Exception, match="extra") as rejected:
            drain(app, app.queue)
        assert any(f"job {bad} typed" in n for n in rejected.value.__notes__)
        job = app.queue.get(bad)
        assert job is not None and job.status is pgq.JobStatus.FAILED

        late = slow.defer()
        with pytest.raises(Exception) as timed_out:  # an async handler's timeout applies
            drain(app, app.queue)
        assert any("ran longer than its timeout of 0.05 s" in n for n in timed_out.value.__notes__)
        job = app.queue.get(late)
        assert job is not None and job.status is pgq.JobStatus.FAILED

        with pytest.raises(pgq.InvalidJob, match="max_jobs"):
            drain(app, app.queue, max_jobs=0)
        with pytest.raises(pgq.InvalidJob, match="list of queue names"):
            drain(app, app.queue, queues="default")  # type: ignore[arg-type]
    finally:
        app.close()


def test_enqueued_and_its_assertions_see_waiting_jobs_and_list_them(pgq_queue: pgq.Queue, pgq_async_queue: Any) -> None:
    a = pgq_queue.enqueue("email", {"to": "a@example.com", "lang": "en"})
    b = pgq_queue.enqueue("email", {"to": "b@example.com", "lang": "fr"}, delay=3600)  # not due: still waits
    c = pgq_queue.enqueue("digest", [1, 2], depends_on=[b])  # status waiting, for its parent
    done = pgq_queue.enqueue("email", {"to": "done@example.com"})
    [claim] = pgq_queue.claim(worker="test", kinds=["email"], limit=1)
    assert claim.job.id == a
    pgq_queue.complete(claim)  # a succeeded: it waits no more

    assert [(j.id, j.status) for j in enqueued(pgq_queue)] == [
        (b, pgq.JobStatus.QUEUED), (c, pgq.JobStatus.WAITING), (done, pgq.JobStatus.QUEUED)]
    assert [j.id for j in enqueued(pgq_queue, "email")] == [b, done]
    assert [j.id for j in enqueued(pgq_queue, "email", lang="fr")] == [b]
    assert enqueued(pgq_queue, "digest", lang="fr") == []  # a payload that is no object holds no key
    assert [j.id for j in assert_enqueued(pgq_queue, "email", to="done@example.com")] == [done]
    assert_not_enqueued(pgq_queue, "email", to="a@example.com")
    assert_not_enqueued(pgq_queue, "sms")

    with pytest.raises(AssertionError) as missing:
        assert_enqueued(pgq_queue, "email", to="z@example.com")
    message = str(missing.value)
    assert "no job of kind 'email' with payload holding {'to': 'z@example.com'} is waiting to run" in message
    assert "3 job(s) waiting to run" in message
    assert f"job {b} email queue='default' status=queued payload={{'to': 'b@example.com', 'lang': 'fr'}}" in message
    assert f"job {c} digest" in message

    with pytest.raises(AssertionError) as present:
        assert_not_enqueued(pgq_queue, "email", lang="fr")
    assert str(present.value).startswith(f"1 job(s) of kind 'email' with payload holding {{'lang': 'fr'}} waiting to "
                                         f"run, expected none:\n  job {b} email")

    async def from_async() -> None:
        async with pgq_async_queue() as queue:
            await queue.enqueue("sms", {"to": "+1"})
            assert [j.kind for j in enqueued(queue, to="+1")] == ["sms"]
            assert_enqueued(queue, "sms", to="+1")
            with pytest.raises(AssertionError, match="4 job"):
                assert_not_enqueued(queue, "sms")
            with pytest.raises(pgq.PgqError, match="not an AsyncQueue"):
                drain(pgq.App(pgq_queue.pool.conninfo), queue)  # type: ignore[arg-type]

    asyncio.run(from_async())


def test_the_assertions_take_a_task_for_its_kind_and_refuse_what_is_no_kind(pgq_dsn: str,
                                                                         pgq_queue: pgq.Queue) -> None:
    app = pgq.App(pgq_dsn)

    @app.task()
    def notify(to: str, queue: str) -> None:
        """A task with a payload key named like the helpers' first parameter."""

    try:
        job = notify.defer(to="a@example.com", queue="mail")
        assert [j.id for j in assert_enqueued(pgq_queue, notify, queue="mail")] == [job]
        assert [j.id for j in enqueued(pgq_queue, notify)] == [job]
        assert enqueued(pgq_queue, notify, queue="sms") == []
        with pytest.raises(AssertionError, match="1 job\\(s\\) of kind 'notify'"):
            assert_not_enqueued(pgq_queue, notify)
        # A kind that is neither a str nor a Task would never match: refused, not passed.
        for bad in (notify.func, None, "", 7):
            with pytest.raises(pgq.InvalidJob, match="kind must be a job kind"):
                assert_not_enqueued(pgq_queue, bad)  # type: ignore[arg-type]
            with pytest.raises(pgq.InvalidJob, match="kind must be a job kind"):
                assert_enqueued(pgq_queue, bad)  # type: ignore[arg-type]
        with pytest.raises(pgq.InvalidJob, match="kind must be a job kind"):
            enqueued(pgq_queue, notify.func)  # type: ignore[arg-type]
    finally:
        app.close()


def test_drain_refuses_async_handlers_inside_a_running_loop(pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)

    @app.task
    async def ping() -> None:
        return None

    async def inside() -> None:
        job_id = ping.defer()
        with pytest.raises(pgq.PgqError, match=r"asyncio\.to_thread"):
            drain(app, pgq_dsn)
        job = app.queue.get(job_id)
        assert job is not None and (job.status, job.attempts) == (pgq.JobStatus.QUEUED, 0)  # handed back
        assert [j.kind for j in await asyncio.to_thread(drain, app, pgq_dsn)] == ["ping"]

    try:
        asyncio.run(inside())
    finally:
        app.close()


def test_pgq_queue_starts_the_test_with_its_pool_connected(pgq_queue: pgq.Queue) -> None:
    # The pool's threads have nothing left to do when the test begins. Opening a connection,
    # psycopg_pool draws from the global `random` (its connection-expiry jitter): in a Hypothesis test
    # that raced the draws of the first example, and Hypothesis took it for a strategy using `random`
    # (a HypothesisDeprecationWarning, now and then, in the summary).
    stats = pgq_queue.pool.get_stats()
    assert stats["pool_size"] == stats.get("pool_available") == pgq_queue.pool.min_size, stats
