"""Django's task contract, as django-tasks 0.12.0 and django-tasks-db 0.12.0 test their backends
(enqueue, results, run_after, errors, signals, context), adapted to PgqBackend: the worker's side
runs inline through `pgq.testing.drain` on the backend's worker app. Where pgq differs on purpose,
the test pins the difference that docs/django.md states. test_contract_api.py,
test_contract_worker.py and test_contract_process.py go through the rest of those upstream tests.

Which upstream tests each test here also covers (django-tasks' `test_tasks.py` as T,
`test_immediate_backend.py` as I; django-tasks-db's DatabaseBackendTestCase as DB,
DatabaseBackendWorkerTestCase as W, DatabaseWorkerProcessTestCase as P):

- test_enqueue_returns_a_ready_result_equal_to_the_one_read_back: T test_enqueue_task,
  test_get_result; DB test_enqueue_task
- test_a_finished_result_refreshes_and_keeps_its_task: W test_run_enqueued_task
- test_run_after_is_kept_as_given_and_not_run_before_it: W test_run_after
- test_async_enqueue_and_get_result: T test_get_result_async
- test_missing_and_malformed_ids_do_not_exist: T test_get_missing_result, DB test_invalid_uuid
- test_a_failing_task_records_its_class_and_traceback: I test_catches_exception, I and W
  test_complex_exception
- test_base_exceptions_and_unserialisable_values_fail_with_their_class: I test_catches_exception,
  I and W test_complex_return_value, P test_system_exit_task, test_keyboard_interrupt_task
- test_started_and_finished_signals_log_each_state: I test_enqueue_logs, test_failed_logs
- test_validation_refuses_what_the_backend_cannot_run: T test_unknown_queue_name, test_invalid_priority
- test_a_task_path_no_worker_imports_stays_queued_as_documented: what pgq does instead of W
  test_invalid_task_path, test_missing_task_path, test_task_import_string
- the others test pgq's own side of the contract (priority and queue mapping, query capture, jobs
  outside QUEUES)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

import psycopg
import pytest

from .contract import enqueue_signals, run


def test_enqueue_returns_a_ready_result_equal_to_the_one_read_back(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import calculate

    with enqueue_signals() as received:
        result = calculate.enqueue(1, 2, times=3)
    assert received == [(type(backend), result)]
    assert result.status == TaskResultStatus.READY and result.task == calculate  # run_after stays None
    assert (result.args, result.kwargs, result.backend) == ([1, 2], {"times": 3}, "default")
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    again = calculate.get_result(result.id)
    assert again.task == calculate and again.id == result.id and again.args == [1, 2]
    assert backend.get_result(result.id).task == calculate
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value


def test_a_finished_result_refreshes_and_keeps_its_task(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import calculate

    result = calculate.enqueue(1, 2, times=3)
    run(backend)
    assert result.status == TaskResultStatus.READY
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 9
    assert result.task == calculate and result.attempts == 1 and result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]


def test_run_after_is_kept_as_given_and_not_run_before_it(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import describe

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    deferred_task = describe.using(run_after=later)
    deferred = deferred_task.enqueue()
    now = describe.enqueue()
    assert deferred.task == deferred_task and deferred.task.run_after == later
    assert describe.get_result(deferred.id).task.run_after == later
    assert describe.get_result(now.id).task.run_after is None
    assert len(run(backend)) == 1
    assert describe.get_result(deferred.id).status == TaskResultStatus.READY
    done = describe.get_result(now.id)
    assert done.return_value == {"attempt": 1, "id": now.id, "status": "RUNNING", "run_after": None}
    assert done.task == describe


def test_priority_and_queue_map_back(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import async_add, calculate

    urgent = calculate.using(priority=50).enqueue(1, 1)
    mail = async_add.enqueue(2, 3)
    assert calculate.get_result(urgent.id).task == calculate.using(priority=50)
    assert async_add.get_result(mail.id).task == async_add
    run(backend)
    assert async_add.get_result(mail.id).return_value == 5


def test_async_enqueue_and_get_result(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import calculate

    async def go() -> tuple[Any, Any]:
        result = await calculate.aenqueue(2, 2)
        return result, await calculate.aget_result(result.id)

    result, again = asyncio.run(go())
    assert again == result or (again.id, again.task, again.args) == (result.id, calculate, [2, 2])


def test_missing_and_malformed_ids_do_not_exist(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultDoesNotExist
    from tests.djangotasks.contract_tasks import noop

    for missing in ("999999999", "not-a-number", ""):
        with pytest.raises(TaskResultDoesNotExist):
            noop.get_result(missing)


def test_a_failing_task_records_its_class_and_traceback(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import nested_error, value_error

    failed, nested = value_error.enqueue(), nested_error.enqueue()
    for _ in range(2):
        with pytest.raises(ValueError):
            run(backend)
    for result in (failed, nested):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
        with pytest.raises(ValueError, match="Task failed"):
            _ = result.return_value
        [error] = result.errors
        assert error.exception_class is ValueError
    assert "ValueError: This task failed due to ValueError" in failed.errors[0].traceback
    assert 'ValueError(ValueError("This task failed"))' in nested.errors[0].traceback or \
        "ValueError: This task failed" in nested.errors[0].traceback


@pytest.mark.parametrize(("name", "raised", "text"), [
    ("exits", SystemExit, "SystemExit"),
    ("interrupted", KeyboardInterrupt, "KeyboardInterrupt"),
    ("not_json", TypeError, "TypeError: "),  # Django: "is not JSON serializable" or "Unsupported type"
])
def test_base_exceptions_and_unserialisable_values_fail_with_their_class(
        backend: Any, name: str, raised: type[BaseException], text: str) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks import contract_tasks

    result = getattr(contract_tasks, name).enqueue()
    with pytest.raises(raised):
        run(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is raised and text in error.traceback


def test_started_and_finished_signals_log_each_state(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    from pgq.contrib.django._tasks import SOURCE
    from tests.djangotasks.contract_tasks import noop, value_error

    ok, failed = noop.enqueue(), value_error.enqueue()
    with caplog.at_level(logging.INFO, logger=SOURCE), pytest.raises(ValueError):
        run(backend)  # noop first (enqueued first), then value_error, which raises from the drain
    lines = [r.getMessage() for r in caplog.records if r.name == SOURCE]
    path = "tests.djangotasks.contract_tasks"
    assert lines == [f"Task id={ok.id} path={path}.noop state=RUNNING",
                     f"Task id={ok.id} path={path}.noop state=SUCCESSFUL",
                     f"Task id={failed.id} path={path}.value_error state=RUNNING",
                     f"Task id={failed.id} path={path}.value_error state=FAILED"]


def test_validation_refuses_what_the_backend_cannot_run(backend: Any) -> None:
    from pgq.contrib.django._tasks import TASK_MAX_PRIORITY
    from tests.djangotasks.contract_tasks import noop

    with pytest.raises(Exception, match=r"[Qq]ueue"):
        noop.using(queue_name="nowhere").enqueue()
    with pytest.raises(Exception, match=r"[Pp]riority"):
        noop.using(priority=TASK_MAX_PRIORITY + 1).enqueue()
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_a_task_path_no_worker_imports_stays_queued_as_documented(backend: Any) -> None:
    """docs/django.md: unlike django-tasks-db (FAILED), pgq keeps such a job for a later release."""
    from pgq.contrib.django._tasks import TaskResultDoesNotExist
    from tests.djangotasks.contract_tasks import noop

    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        [job_id] = conn.execute("SELECT pgq.enqueue('tests.djangotasks.contract_tasks.gone', "
                                """'{"args": [], "kwargs": {}}')""").fetchone()
    with pytest.raises(TaskResultDoesNotExist):
        noop.get_result(str(job_id))
    assert run(backend) == []
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT status::text FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone() == ("queued",)


def test_pgq_statements_are_django_queries(backend: Any) -> None:
    """assertNumQueries, CaptureQueriesContext and execute_wrapper hooks see pgq's statements."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.djangotasks.contract_tasks import calculate

    hooked: list[str] = []

    def hook(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        hooked.append(str(sql))
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(hook):
        result = calculate.enqueue(1, 2)
        assert calculate.get_result(result.id).args == [1, 2]
    assert len(captured.captured_queries) >= 2 and len(hooked) == len(captured.captured_queries)
    assert any("pgq" in str(q["sql"]) for q in captured.captured_queries), captured.captured_queries
    with connection.execute_wrapper(hook):  # no capture: the hooks alone, results still decoded
        assert calculate.get_result(result.id).task == calculate


def test_a_database_error_through_django_s_wrapper_is_psycopg_s_for_pgq_to_translate(backend: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from pgq.contrib.django._cursor import django_cursor

    connection.ensure_connection()
    with CaptureQueriesContext(connection) as captured, django_cursor(connection) as cursor, \
            pytest.raises(psycopg.errors.DivisionByZero):
        cursor.execute("SELECT 1 / %s", [0])
    assert "1 / " in str(captured.captured_queries[-1]["sql"])


def test_a_job_outside_queues_still_runs_without_signals(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A job of a task put in a queue the backend does not name (by SQL, say) runs; Django cannot
    read it back (get_result), so no signal carries it."""
    from pgq.contrib.django._tasks import SOURCE

    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        [job_id] = conn.execute("SELECT pgq.enqueue('tests.djangotasks.contract_tasks.calculate', "
                                """'{"args": [2, 3], "kwargs": {}}', 'elsewhere')""").fetchone()
    with caplog.at_level(logging.INFO, logger=SOURCE):
        [job] = run(backend)
    assert (job.id, job.result) == (job_id, 5)
    assert [r for r in caplog.records if r.name == SOURCE] == []
