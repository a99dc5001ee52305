"""Unit tests of pgq.app and the worker settings: registration, arguments, policies, polling schedule."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import pgq
from pgq.app import App, load_app
from pgq.errors import InvalidJob, PgqError
from pgq.retries import Backoff, polling_schedule
from pgq.worker import WorkerConfig

DSN = "postgresql://nobody@127.0.0.1:1/never"  # never connected to in these tests


def make_app() -> App:
    return App(DSN)


def test_task_registers_sync_and_async_handlers_under_their_names() -> None:
    app = make_app()

    @app.task
    def plain(x: int) -> int:
        return x

    @app.task(name="other", queue="q", priority=-3, max_attempts=2, timeout=dt.timedelta(seconds=4))
    async def coro(y: str) -> str:
        return y

    assert app.tasks.keys() == {"plain", "other"}
    assert not plain.is_async and coro.is_async
    assert (coro.queue, coro.priority, coro.max_attempts, coro.timeout) == ("q", -3, 2, 4.0)
    assert plain(x=3) == 3  # calling the task calls the handler


def test_task_name_registered_twice_is_refused() -> None:
    app = make_app()
    app.task(name="dup")(lambda: None)
    with pytest.raises(PgqError, match="already registered"):
        app.task(name="dup")(lambda: None)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"timeout": 0}, "timeout"),
        ({"concurrency_limit": 0}, "concurrency_limit"),
        ({"priority": 10**6}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"retry": object()}, "retry_in"),
        ({"queue": ""}, "queue"),
    ],
)
def test_task_rejects_bad_options_at_registration(options: dict[str, object], fragment: str) -> None:
    app = make_app()
    with pytest.raises(InvalidJob, match=fragment):
        app.task(**options)(lambda: None)  # type: ignore[call-overload]


def test_check_arguments_names_the_task_and_the_bad_argument() -> None:
    app = make_app()

    @app.task
    def send(to: str, subject: str = "") -> None:
        pass

    assert send.check_arguments({"to": "a"}) == {"to": "a"}
    with pytest.raises(InvalidJob, match=r"task 'send'.*JSON object.*list"):
        send.check_arguments([1])
    with pytest.raises(InvalidJob, match=r"task 'send'.*unexpected keyword argument 'cc'"):
        send.check_arguments({"to": "a", "cc": "b"})
    with pytest.raises(InvalidJob, match=r"task 'send'.*missing a required argument: 'to'"):
        send.check_arguments({})


def test_spec_stores_positional_arguments_under_their_parameter_names() -> None:
    app = make_app()

    @app.task
    def send(to: str, subject: str = "", *, cc: str = "") -> None:
        pass

    assert send.spec("a", "hi").payload == {"to": "a", "subject": "hi"}
    assert send.spec("a", cc="b").payload == {"to": "a", "cc": "b"}
    assert send.configure(queue="q").spec("a", subject="hi").payload == {"to": "a", "subject": "hi"}
    assert send.payload(("a",), {}) == {"to": "a"}


def test_positional_arguments_without_a_payload_name_are_refused() -> None:
    app = make_app()

    @app.task
    def send(to: str, subject: str = "", *, cc: str = "") -> None:
        pass

    @app.task
    def only(a: int, /, b: int = 0) -> None:
        pass

    @app.task
    def spread(first: int, *rest: int) -> None:
        pass

    with pytest.raises(InvalidJob, match=r"task 'send'.*too many positional arguments \(3\)"):
        send.spec("a", "hi", "b")  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match=r"task 'send'.*multiple values for 'to'"):
        send.spec("a", to="b")  # type: ignore[misc]
    with pytest.raises(InvalidJob, match=r"task 'only'.*argument 1 binds to positional-only 'a'"):
        only.spec(1)
    with pytest.raises(InvalidJob, match=r"task 'spread'.*argument 2 binds to \*rest"):
        spread.spec(1, 2)
    with pytest.raises(InvalidJob, match=r"task 'send'.*missing a required argument: 'to'"):
        send.spec(cc="b")  # type: ignore[call-arg]
    assert spread.spec(1).payload == {"first": 1}


def test_configure_keeps_job_options_apart_from_handler_arguments() -> None:
    app = make_app()

    @app.task(queue="mail", priority=5, max_attempts=3)
    def send(queue: str, delay: int) -> None:  # argument names that are also option names
        pass

    spec = send.configure(queue="urgent", dedupe_key="k", watermark=7, delay=2.5).spec(queue="x", delay=1)
    assert spec.payload == {"queue": "x", "delay": 1}
    assert (spec.kind, spec.queue, spec.priority, spec.max_attempts) == ("send", "urgent", 5, 3)
    assert (spec.dedupe_key, spec.watermark, spec.delay_s) == ("k", 7, 2.5)
    default = send.spec(queue="x", delay=1)
    assert (default.queue, default.dedupe_key) == ("mail", None)
    with pytest.raises(InvalidJob, match="unexpected keyword"):
        send.spec(queue="x", delay=1, nope=1)  # type: ignore[call-arg]


def test_defer_refuses_a_connection_of_the_wrong_kind() -> None:
    app = make_app()

    @app.task
    def noop() -> None:
        pass

    class FakeAsync:  # anything that is not a psycopg.Connection
        pass

    with pytest.raises(PgqError, match=r"psycopg\.Connection"):
        noop.configure(conn=FakeAsync()).defer()  # type: ignore[arg-type]


def test_periodic_registers_task_and_schedule() -> None:
    app = make_app()

    @app.periodic(every=dt.timedelta(minutes=5), queue="cron", kwargs={"full": True})
    def report(full: bool) -> None:
        pass

    @app.periodic(cron="0 3 * * *", name="nightly-report")
    @app.task(name="report2")
    def report2() -> None:
        pass

    assert {p.name for p in app.periodic_tasks} == {"report", "nightly-report"}
    periodic = {p.name: p for p in app.periodic_tasks}["report"]
    tick = dt.datetime(2024, 1, 1, 0, 5, tzinfo=dt.UTC)
    spec = periodic.spec(tick)
    assert (spec.kind, spec.queue, spec.payload) == ("report", "cron", {"full": True})
    assert spec.dedupe_key == f"periodic:report:{int(tick.timestamp())}"
    assert report.queue == "cron"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "exactly one"),
        ({"cron": "* * * * *", "every": 5}, "exactly one"),
        ({"cron": "nope"}, "5 fields"),
        ({"every": 0.5}, "whole number"),
    ],
)
def test_periodic_rejects_bad_schedules(options: dict[str, object], error: str) -> None:
    with pytest.raises(PgqError, match=error):
        make_app().periodic(**options)  # type: ignore[arg-type]


def test_periodic_kwargs_must_fit_the_handler() -> None:
    app = make_app()
    with pytest.raises(InvalidJob, match="unexpected keyword argument 'x'"):
        app.periodic(every=5, kwargs={"x": 1})(lambda: None)


def test_backoff_grows_caps_and_never_goes_under_its_minimum() -> None:
    fixed = Backoff(initial=5, factor=1, jitter=0)
    assert [fixed.retry_in(a, ValueError()) for a in (1, 2, 10)] == [5, 5, 5]
    exp = Backoff(initial=1, factor=2, max_delay=10, jitter=0, min_delay=0)
    assert [exp.retry_in(a, ValueError()) for a in (1, 2, 3, 4, 5, 100)] == [1, 2, 4, 8, 10, 10]
    default = pgq.retries.DEFAULT_RETRY
    delays = [default.retry_in(a, ValueError()) for a in range(1, 30) for _ in range(20)]
    assert min(delays) >= 1.0 and max(delays) <= 3600.0
    first = [default.retry_in(1, ValueError()) for _ in range(200)]
    assert min(first) >= 1.5 and max(first) <= 2.5 and len(set(first)) > 1  # jittered around 2 s


@pytest.mark.parametrize("bad", [{"initial": -1}, {"factor": 0.5}, {"jitter": 1.0}, {"min_delay": 5, "max_delay": 1}])
def test_backoff_rejects_bad_values(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidJob):
        Backoff(**bad)


def test_polling_schedule_fast_then_slow_then_deadline() -> None:
    deadline = dt.timedelta(minutes=10)
    assert polling_schedule(0, deadline=deadline) == 10
    assert polling_schedule(dt.timedelta(seconds=119), deadline=deadline) == 10
    assert polling_schedule(120, deadline=deadline) == 60
    assert polling_schedule(590, deadline=deadline) == 10  # never sleeps past the deadline
    assert polling_schedule(600, deadline=deadline) is None
    assert polling_schedule(5, deadline=60, fast=1, fast_for=2, slow=30) == 30


def test_polling_schedule_walk_reaches_the_deadline_exactly() -> None:
    elapsed, polls = 0.0, 0
    while (step := polling_schedule(elapsed, deadline=300)) is not None:
        elapsed += step
        polls += 1
    assert elapsed == 300
    assert polls == 12 + 3  # 12 fast polls in the first 2 minutes, then 60 s steps to 300 s


def test_snooze_validates_its_delay() -> None:
    assert pgq.Snooze(dt.timedelta(seconds=3)).delay == 3.0
    with pytest.raises(InvalidJob):
        pgq.Snooze(-1)


def test_current_job_outside_a_handler_raises() -> None:
    with pytest.raises(PgqError, match="inside task handlers"):
        pgq.current_job()
    with pytest.raises(PgqError):
        pgq.poll_later(60)


def test_load_app_finds_an_app_and_explains_bad_specs() -> None:
    assert load_app("tests.worker.test_app:MODULE_APP") is MODULE_APP
    with pytest.raises(PgqError, match="expected MODULE:APP"):
        load_app("no-colon")
    with pytest.raises(PgqError, match="no module named 'surely_missing_mod'"):
        load_app("surely_missing_mod:app")
    with pytest.raises(PgqError, match="has no attribute 'nope'"):
        load_app("tests.worker.test_app:nope")
    with pytest.raises(PgqError, match="not a pgq App"):
        load_app("tests.worker.test_app:DSN")


MODULE_APP = make_app()


def test_worker_config_defaults_and_conversions() -> None:
    config = WorkerConfig.build(queues=["a", "b"], lease=dt.timedelta(seconds=30), claimed_by=None)
    assert config.queues == ("a", "b")
    assert config.lease == 30.0
    assert config.effective_rescue_interval == 15.0
    assert config.claimed_by  # hostname-pid
    assert WorkerConfig(concurrency=64).effective_pool_size == 10
    assert config.effective_io_timeout == 7.5  # a quarter of the lease
    assert WorkerConfig(lease=2).effective_io_timeout == 5.0  # at least 5 s
    assert WorkerConfig(io_timeout=1.5).effective_io_timeout == 1.5


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"lease": 0}, "lease"),
        ({"poll_interval": -1}, "poll_interval"),
        ({"queues": "default"}, "queues"),
        ({"queues": []}, "queues"),
        ({"retention": 0}, "retention"),
        ({"claimed_by": ""}, "claimed_by"),
        ({"io_timeout": 0}, "io_timeout"),
        ({"connect_timeout": -1}, "connect_timeout"),
        ({"bogus": 1}, "unknown worker setting"),
    ],
)
def test_worker_config_rejects_bad_settings(settings: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidJob, match=fragment):
        WorkerConfig.build(**settings)


def test_worker_refuses_catch_up_longer_than_retention() -> None:
    app = make_app()
    app.periodic(every=60, catch_up=dt.timedelta(days=2))(lambda: None)
    with pytest.raises(InvalidJob, match="catch_up"):
        pgq.Worker(app, retention=dt.timedelta(days=1))
    pgq.Worker(app, retention=None)  # keeping jobs forever is fine


def test_enqueue_by_kind_takes_the_registered_tasks_options(pgq_dsn: str) -> None:
    app = App(pgq_dsn)

    @app.task(queue="mail", priority=3, max_attempts=5)
    def send_email(to: str) -> None:
        """Send one email."""

    with pgq.Queue(pgq_dsn, app=app) as queue:
        by_name = queue.get(queue.enqueue("send_email", {"to": "a@example.com"}))
        overridden = queue.get(queue.enqueue("send_email", {"to": "b@example.com"}, queue="bulk",
                                             priority=-1, max_attempts=2))
        unknown = queue.get(queue.enqueue("resize", {}))
    assert by_name is not None and (by_name.queue, by_name.priority, by_name.max_attempts) == ("mail", 3, 5)
    assert overridden is not None and (overridden.queue, overridden.priority, overridden.max_attempts) == (
        "bulk", -1, 2)
    assert unknown is not None and (unknown.queue, unknown.priority, unknown.max_attempts) == ("default", 0, 25)
    with pgq.Queue(pgq_dsn) as plain:  # without an app, a queue cannot know the task
        job = plain.get(plain.enqueue("send_email", {"to": "c@example.com"}))
    assert job is not None and (job.queue, job.max_attempts) == ("default", 25)
    own = app.queue.get(app.queue.enqueue("send_email", {"to": "d@example.com"}))  # the App's own queue
    assert own is not None and (own.queue, own.priority, own.max_attempts) == ("mail", 3, 5)

    async def main() -> tuple[str, int, int]:
        async with pgq.AsyncQueue(pgq_dsn, app=app) as aqueue:
            job = await aqueue.get(await aqueue.enqueue("send_email", {"to": "e@example.com"}))
        own_async = await app.async_queue()
        mine = await own_async.get(await own_async.enqueue("send_email", {"to": "f@example.com"}))
        await app.aclose()
        assert job is not None and mine is not None and (mine.queue, mine.max_attempts) == ("mail", 5)
        return job.queue, job.priority, job.max_attempts

    assert asyncio.run(main()) == ("mail", 3, 5)
    app.close()
