"""Django's task contract on the worker's side (running tasks, their outcome, errors, logs, which
jobs a worker takes), written for PgqBackend from the behaviours that django-tasks 0.12.0 and
django-tasks-db 0.12.0 test on their own backends. The worker's side runs inline through
`pgq.testing.drain` on the backend's worker app (what `pgq_worker` runs); `pgq_worker`'s own
options are checked through its parser.

Which upstream tests each test covers (django-tasks' `test_immediate_backend.py` as I and
`test_dummy_backend.py` as D; django-tasks-db's DatabaseBackendTestCase as DB and
DatabaseBackendWorkerTestCase as W):

- test_a_task_that_ran_reads_back_finished_with_one_attempt: I test_enqueue_task,
  test_enqueue_task_async; W test_run_enqueued_task; D test_refresh_result, test_refresh_result_async
  and DB test_refresh_result, test_refresh_result_async (there the store is changed behind the
  result; here a worker runs it)
- test_the_return_value_comes_back: I test_result, test_result_async
- test_a_failure_records_its_class_message_and_traceback: I test_catches_exception; W
  test_failing_task, test_worker_doesnt_exit
- test_an_exception_holding_an_exception_is_recorded_whole: I and W test_complex_exception
- test_a_return_value_json_cannot_hold_fails_the_task: I and W test_complex_return_value
- test_each_state_is_logged: I test_enqueue_logs, test_failed_logs; W test_verbose_logging (its
  "Task id=... state=..." lines; the worker's own start and stop lines are db_worker's)
- test_the_context_names_the_result_and_attempt: I and W test_takes_context, test_context
- test_a_worker_runs_every_ready_task: W test_batch_processes_all_tasks, test_no_tasks
- test_a_worker_takes_only_its_queues: W test_doesnt_process_different_queue, test_process_all_queues
- test_a_worker_of_another_backend_leaves_the_jobs: W test_doesnt_process_different_backend
- test_a_deferred_task_runs_once_due: W test_run_after
- test_ready_tasks_run_by_priority_then_run_after: W test_run_after_priority
- test_a_locked_job_is_skipped: W test_worker_with_locked_rows
- test_a_task_path_no_worker_can_import_fails: W test_invalid_task_path, test_missing_task_path,
  test_task_import_string (xfail: pgq keeps such jobs, docs/django.md)
- test_a_recorded_class_path_that_is_no_exception_raises_on_access: django-tasks' test_tasks.py
  test_task_error_invalid_exception, test_task_error_unknown_module
- test_pgq_worker_refuses_bad_backends_and_options: W test_unknown_backend, test_incorrect_backend,
  test_negative_interval, test_infinite_interval, test_fractional_interval, test_empty_worker_id

test_contract.py's test_base_exceptions_and_unserialisable_values_fail_with_their_class covers the
worker's side of django-tasks-db's DatabaseWorkerProcessTestCase test_system_exit_task and
test_keyboard_interrupt_task (test_contract_process.py runs them on `pgq_worker` too).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import psycopg
import pytest

from .contract import run, run_all


def assert_finished(result: Any) -> None:
    """`result` ran once and finished: its times are set and in order."""
    assert result.is_finished and result.attempts == 1
    assert None not in (result.started_at, result.last_attempted_at, result.finished_at)
    assert result.enqueued_at <= result.started_at <= result.finished_at


def jobs_by_status(dsn: str) -> dict[str, int]:
    """How many jobs there are of each pgq status."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT status::text, count(*) FROM pgq.jobs GROUP BY 1").fetchall())


@pytest.mark.parametrize("name", ["accept_anything", "async_accept_anything"])
def test_a_task_that_ran_reads_back_finished_with_one_attempt(backend: Any, name: str) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks import contract_tasks

    task = getattr(contract_tasks, name)
    result, other = task.enqueue(1, two=3), task.enqueue()
    run(backend)
    assert (result.status, result.attempts) == (TaskResultStatus.READY, 0)  # until refreshed
    with CaptureQueriesContext(connection) as captured:
        result.refresh()
    assert len(captured.captured_queries) == 1
    asyncio.run(other.arefresh())
    for done, args, kwargs in ((result, [1], {"two": 3}), (other, [], {})):
        assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value is None
        assert_finished(done)
        assert (done.task, done.args, done.kwargs, done.errors) == (task, args, kwargs, [])


def test_the_return_value_comes_back(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import answer

    results = [backend.enqueue(answer, [], {}), asyncio.run(backend.aenqueue(answer, [], {}))]
    run(backend)
    for result in results:
        result.refresh()
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


@pytest.mark.parametrize(("name", "raised", "message"), [
    ("value_error", ValueError, "This task failed due to ValueError"),
    ("exits_with_message", SystemExit, "stopped by the task itself"),
    ("exits", SystemExit, "1"),
])
def test_a_failure_records_its_class_message_and_traceback(
        backend: Any, caplog: pytest.LogCaptureFixture, name: str, raised: type[BaseException], message: str) -> None:
    from pgq.contrib.django._tasks import SOURCE, TaskResultStatus
    from tests.djangotasks import contract_tasks

    task = getattr(contract_tasks, name)
    result = task.enqueue()
    with caplog.at_level(logging.ERROR, logger=SOURCE):
        assert [type(exc) for exc in run_all(backend)] == [raised]  # and the worker goes on
    [logged] = [r for r in caplog.records if r.name == SOURCE]
    assert logged.levelno == logging.ERROR and logged.exc_text and message in logged.exc_text
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert_finished(result)
    [error] = result.errors
    assert error.exception_class is raised
    assert error.traceback.endswith(f"{raised.__name__}: {message}\n"), error.traceback
    assert (result.task, result.args, result.kwargs) == (task, [], {})


def test_an_exception_holding_an_exception_is_recorded_whole(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import nested_error

    result = nested_error.enqueue()
    assert [type(exc) for exc in run_all(backend)] == [ValueError]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result._return_value is None
    assert_finished(result)
    [error] = result.errors
    assert error.exception_class is ValueError
    assert 'raise ValueError(ValueError("This task failed"))' in error.traceback  # the raising line
    assert error.traceback.endswith("ValueError: This task failed\n"), error.traceback


def test_a_return_value_json_cannot_hold_fails_the_task(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import returns_a_function

    result = returns_a_function.enqueue()
    assert [type(exc) for exc in run_all(backend)] == [TypeError]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result._return_value is None
    assert_finished(result)
    [error] = result.errors
    # Django's normalize_json says "Unsupported type"; django-tasks-db's json "is not JSON serializable".
    assert error.exception_class is TypeError and "Unsupported type" in error.traceback


def test_each_state_is_logged(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    from pgq.contrib.django._tasks import SOURCE
    from tests.djangotasks.contract_tasks import accept_anything, value_error

    path = "tests.djangotasks.contract_tasks"
    with caplog.at_level(logging.DEBUG, logger=SOURCE):
        ok = accept_anything.enqueue()
        run(backend)
        failed = value_error.enqueue()
        run_all(backend)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == SOURCE]
    assert lines == [
        (logging.DEBUG, f"Task id={ok.id} path={path}.accept_anything enqueued backend=default"),
        (logging.INFO, f"Task id={ok.id} path={path}.accept_anything state=RUNNING"),
        (logging.INFO, f"Task id={ok.id} path={path}.accept_anything state=SUCCESSFUL"),
        (logging.DEBUG, f"Task id={failed.id} path={path}.value_error enqueued backend=default"),
        (logging.INFO, f"Task id={failed.id} path={path}.value_error state=RUNNING"),
        (logging.ERROR, f"Task id={failed.id} path={path}.value_error state=FAILED"),
    ]


def test_the_context_names_the_result_and_attempt(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import expect_attempt, own_id

    named, counted = own_id.enqueue(), expect_attempt.enqueue(1)
    run(backend)
    assert own_id.get_result(named.id).return_value == named.id
    done = expect_attempt.get_result(counted.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 1)


def test_a_worker_runs_every_ready_task(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import accept_anything, value_error

    assert run(backend) == []  # nothing to do: nothing done
    for _ in range(3):
        accept_anything.enqueue()
    value_error.enqueue()
    assert jobs_by_status(backend.dsn) == {"queued": 4}
    assert [type(exc) for exc in run_all(backend)] == [ValueError]
    assert jobs_by_status(backend.dsn) == {"succeeded": 3, "failed": 1}


def test_a_worker_takes_only_its_queues(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import accept_anything

    mailed = accept_anything.using(queue_name="mail").enqueue()
    assert run(backend, queues=["default"]) == []
    assert accept_anything.get_result(mailed.id).status == TaskResultStatus.READY
    assert [job.id for job in run(backend, queues=sorted(backend.queues))] == [int(mailed.id)]  # pgq_worker's default
    assert accept_anything.get_result(mailed.id).status == TaskResultStatus.SUCCESSFUL


def test_a_worker_of_another_backend_leaves_the_jobs(backend: Any) -> None:
    from django.conf import settings
    from django.test import override_settings

    from pgq.contrib.django._tasks import task_backends
    from pgq.testing import drain
    from tests.djangotasks.contract_tasks import accept_anything

    accept_anything.enqueue()
    with override_settings(TASKS={**settings.TASKS, "other": {"BACKEND": "pgq.contrib.django.PgqBackend"}}):
        other = task_backends["other"]
        app = other.worker_app()  # what `pgq_worker --backend other` runs: none of default's tasks
        try:
            assert drain(app, other.dsn) == []
        finally:
            app.close()
    assert jobs_by_status(backend.dsn) == {"queued": 1}
    assert len(run(backend)) == 1


def test_a_deferred_task_runs_once_due(backend: Any) -> None:
    import datetime as dt

    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import accept_anything

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=10)
    result = accept_anything.using(run_after=later).enqueue()
    assert run(backend) == []
    assert accept_anything.get_result(result.id).status == TaskResultStatus.READY
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgq.jobs SET run_at = now() WHERE id = %s", (int(result.id),))
    assert len(run(backend)) == 1
    done = accept_anything.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.task.run_after == later  # as enqueued


def test_ready_tasks_run_by_priority_then_run_after(backend: Any) -> None:
    import datetime as dt

    from tests.djangotasks.contract_tasks import accept_anything as task

    now = dt.datetime.now(dt.UTC)
    hours = dt.timedelta(hours=1)
    two_hours_ago = task.using(priority=20, run_after=now - 2 * hours).enqueue()
    ten_hours_ago = task.using(priority=20, run_after=now - 10 * hours).enqueue()
    task.using(run_after=now + 10 * hours).enqueue()
    task.using(priority=10, run_after=now + 10 * hours).enqueue()
    task.using(run_after=now + 2 * hours).enqueue()
    high, low, lower = (task.using(priority=p).enqueue() for p in (10, 2, -2))
    ran = [str(job.id) for job in run(backend)]
    assert ran == [r.id for r in (ten_hours_ago, two_hours_ago, high, low, lower)]


def test_a_locked_job_is_skipped(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import accept_anything

    locked = accept_anything.enqueue()
    with psycopg.connect(backend.dsn) as other:  # a transaction of another session holds its row
        other.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (int(locked.id),))
        free = accept_anything.enqueue()
        assert [str(job.id) for job in run(backend)] == [free.id]
    assert accept_anything.get_result(locked.id).status == TaskResultStatus.READY
    assert accept_anything.get_result(free.id).status == TaskResultStatus.SUCCESSFUL


@pytest.mark.xfail(strict=True, reason="docs/django.md, 'A task path no worker can import': pgq keeps "
                                        "such a job queued for a later release instead of failing it")
def test_a_task_path_no_worker_can_import_fails(backend: Any) -> None:
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        for kind in ("subprocess.check_output", "no_such_module.func", "tests.djangotasks.contract_tasks.absent"):
            conn.execute("SELECT pgq.enqueue(%s, %s::jsonb)", (kind, json.dumps({"args": [], "kwargs": {}})))
    run_all(backend)
    assert jobs_by_status(backend.dsn) == {"failed": 3}


def test_pgq_worker_refuses_bad_backends_and_options(backend: Any) -> None:
    from django.conf import settings
    from django.core.management import call_command, load_command_class
    from django.core.management.base import CommandError
    from django.test import override_settings

    from pgq.contrib.django._tasks import SOURCE

    with pytest.raises(CommandError, match=r"no task backend 'unknown'.*The connection 'unknown' doesn't exist"):
        call_command("pgq_worker", backend="unknown")
    dummy = {"BACKEND": f"{SOURCE}.backends.dummy.DummyBackend"}
    refused = r"task backend 'dummy' is DummyBackend, not pgq\.contrib\.django\.PgqBackend"
    with override_settings(TASKS={**settings.TASKS, "dummy": dummy}), pytest.raises(CommandError, match=refused):
        call_command("pgq_worker", backend="dummy")
    parser = load_command_class("pgq.contrib.django", "pgq_worker").create_parser("manage.py", "pgq_worker")
    for option, value, why in (("--poll-interval", "-1", "poll interval must be a finite number of seconds > 0"),
                               ("--poll-interval", "inf", "poll interval must be a finite number of seconds > 0"),
                               ("--worker-id", "", "claimed-by must not be empty")):
        with pytest.raises(CommandError, match=why):
            parser.parse_args([option, value])
    assert parser.parse_args(["--poll-interval", "0.1"]).poll_interval == 0.1


def test_a_recorded_class_path_that_is_no_exception_raises_on_access(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import value_error

    result = value_error.enqueue()
    run_all(backend)
    for path, raised, message in (
            ("subprocess.run", ValueError, r"'subprocess\.run' does not reference a valid exception"),
            ("no_such_module.Error", ImportError, "no_such_module")):
        with psycopg.connect(backend.dsn, autocommit=True) as conn:  # as another release may have written it
            conn.execute("UPDATE pgq.jobs SET progress = jsonb_build_object('django_exception_class', %s::text) "
                         "WHERE id = %s", (path, int(result.id)))
        [error] = value_error.get_result(result.id).errors
        assert error.exception_class_path == path
        with pytest.raises(raised, match=message):
            _ = error.exception_class
