"""Django's task contract on the producer's side (declaring, `using`, enqueueing, reading results
back, validation), written for PgqBackend from the behaviours that django-tasks 0.12.0 and
django-tasks-db 0.12.0 test on their own backends. No worker runs here but in the views test.

Which upstream tests each test covers (django-tasks' `tests/tests/test_tasks.py` as T,
`test_dummy_backend.py` as D, `test_immediate_backend.py` as I; django-tasks-db's
DatabaseBackendTestCase as DB):

- test_the_default_backend_is_pgq_with_its_alias_and_options: T, D, I and DB test_using_correct_backend
- test_every_way_of_declaring_a_task_makes_a_task: T test_task_decorator, test_name, test_module_path
- test_using_returns_a_changed_copy: T test_using_priority, test_using_queue_name,
  test_using_run_after, test_using_creates_new_instance, test_chained_using
- test_using_refuses_invalid_values: T test_naive_datetime, test_invalid_priority,
  test_unknown_queue_name (its first half)
- test_a_backend_without_queues_takes_any_queue: T test_unknown_queue_name (its second half)
- test_unknown_missing_and_absent_backends_are_refused: T test_using_unknown_backend,
  test_using_missing_backend, test_no_backends
- test_get_backend_returns_the_backend_of_the_alias: T test_get_backend
- test_call_runs_the_function_here: T test_call_task, test_call_task_async, test_call_async_task,
  test_call_async_task_sync
- test_the_decorator_refuses_what_cannot_be_a_task: T test_invalid_function,
  test_takes_context_without_taking_context
- test_enqueue_returns_a_ready_unstarted_result: T test_enqueue_task, D test_enqueue_task,
  D test_errors, D test_takes_context, DB test_enqueue_task (not its UUID version)
- test_aenqueue_returns_a_ready_unstarted_result: T, D and DB test_enqueue_task_async
- test_an_argument_json_cannot_hold_is_refused: T test_enqueue_with_invalid_argument,
  test_aenqueue_with_invalid_argument
- test_get_result_reads_back_an_equal_result: T, D and DB test_get_result and test_get_result_async
- test_a_missing_or_malformed_id_has_no_result: T and D test_get_missing_result, DB
  test_get_missing_result, test_async_get_missing_result, test_invalid_uuid, test_async_invalid_uuid
- test_the_result_of_another_task_is_a_mismatch: T test_get_incorrect_result,
  test_get_incorrect_result_async
- test_refreshing_a_ready_result_changes_nothing: T test_refresh_result
- test_enqueue_logs_one_line: D and DB test_enqueue_logs
- test_an_async_task_is_refused_where_unsupported: D test_validate_disallowed_async_task
- test_check_finds_nothing_wrong: D, I and DB test_check
- test_enqueue_checks_the_queue_against_the_backend: D, I and DB test_validate_on_enqueue and
  test_validate_on_aenqueue
- test_an_enqueue_is_seen_elsewhere_only_once_committed: DB test_doesnt_wait_until_transaction_commit
- test_run_after_stays_none_with_or_without_time_zones: DB test_run_after_tz
- test_a_job_that_is_no_task_has_no_result: DB test_invalid_task_path, test_missing_task_path
  (upstream: the model's `task` raises; here: `get_result` never imports the path)
- test_views_enqueue_and_read_results_across_requests: D test_meaning_of_life_view,
  test_get_result_from_different_request; I test_meaning_of_life_view

The upstream tests judged specific to those backends are listed in docs/django.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
from typing import Any
from unittest import mock

import psycopg
import pytest

from .contract import api, enqueue_signals, run


def other_backends(**extra: dict[str, Any]) -> dict[str, Any]:
    """settings.TASKS with `extra` backends beside the project's."""
    from django.conf import settings

    return {**settings.TASKS, **extra}


def test_the_default_backend_is_pgq_with_its_alias_and_options(backend: Any) -> None:
    from pgq.contrib.django import PgqBackend
    from pgq.contrib.django._tasks import task_backends

    default = api("default_task_backend")
    assert default == task_backends["default"] and isinstance(task_backends["default"], PgqBackend)
    assert (default.alias, default.options) == ("default", {})


def test_every_way_of_declaring_a_task_makes_a_task() -> None:
    from pgq.contrib.django._tasks import Task
    from tests.djangotasks import contract_tasks as t

    for declared, name in ((t.accept_anything, "accept_anything"), (t.bare, "bare"),
                           (t.async_accept_anything, "async_accept_anything")):
        assert isinstance(declared, Task) and declared.name == name
        assert declared.module_path == f"tests.djangotasks.contract_tasks.{name}"
        assert getattr(t, name) is declared  # the module path leads back to the task


def test_using_returns_a_changed_copy() -> None:
    from tests.djangotasks.contract_tasks import accept_anything as task

    when = dt.datetime.now(dt.UTC)
    assert (task.priority, task.queue_name, task.run_after) == (0, api("DEFAULT_TASK_QUEUE_NAME"), None)
    same = task.using()
    assert same == task and same is not task
    changed = task.using(priority=7).using(queue_name="mail").using(run_after=when)
    assert (changed.priority, changed.queue_name, changed.run_after) == (7, "mail", when)
    assert task.using(run_after=when).priority == 0  # each step copies, none changes its origin
    assert (task.priority, task.queue_name, task.run_after) == (0, "default", None)


def test_using_refuses_invalid_values() -> None:
    from pgq.contrib.django._tasks import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
    from tests.djangotasks.contract_tasks import accept_anything as task

    invalid = api("InvalidTask")
    with pytest.raises(invalid, match="run_after must be an aware datetime"):
        task.using(run_after=dt.datetime.now())  # naive on purpose
    for priority in (TASK_MIN_PRIORITY - 1, TASK_MAX_PRIORITY + 1, 2.5):
        with pytest.raises(invalid, match="priority must be a whole number between"):
            task.using(priority=priority)  # type: ignore[arg-type]  # 2.5 on purpose
    for priority in (TASK_MIN_PRIORITY, 0, TASK_MAX_PRIORITY):
        assert task.using(priority=priority).priority == priority
    with pytest.raises(invalid, match="Queue 'nowhere' is not valid for backend"):
        task.using(queue_name="nowhere")


def test_a_backend_without_queues_takes_any_queue(backend: Any) -> None:
    from django.test import override_settings

    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import answer

    open_backend = {"BACKEND": "pgq.contrib.django.PgqBackend", "QUEUES": []}
    with override_settings(TASKS=other_backends(open=open_backend)):
        anywhere = answer.using(backend="open", queue_name="anywhere")
        result = anywhere.enqueue()
        assert result.task == anywhere and result.backend == "open"
        run(anywhere.get_backend())
        result.refresh()
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_unknown_missing_and_absent_backends_are_refused() -> None:
    from django.test import override_settings

    from tests.djangotasks.contract_tasks import accept_anything as task

    invalid = api("InvalidTaskBackend")
    assert task.backend == "default"
    with pytest.raises(invalid, match="The connection 'unknown' doesn't exist"):
        task.using(backend="unknown")
    with override_settings(TASKS=other_backends(missing={"BACKEND": "no.such.Backend"})), \
            pytest.raises(invalid, match=r"Could not find backend 'no\.such\.Backend': No module named 'no'"):
        task.using(backend="missing")
    with override_settings(TASKS={}), pytest.raises(invalid):
        task.enqueue()


def test_get_backend_returns_the_backend_of_the_alias() -> None:
    from django.test import override_settings

    from pgq.contrib.django import PgqBackend
    from tests.djangotasks.contract_tasks import accept_anything as task

    with override_settings(TASKS=other_backends(other={"BACKEND": "pgq.contrib.django.PgqBackend"})):
        assert isinstance(task.get_backend(), PgqBackend) and task.get_backend().alias == "default"
        elsewhere = task.using(backend="other")
        assert elsewhere.backend == "other" and elsewhere.get_backend().alias == "other"


def test_call_runs_the_function_here() -> None:
    from tests.djangotasks.contract_tasks import answer, async_accept_anything

    async def in_a_loop() -> tuple[Any, Any]:
        return await answer.acall(), await async_accept_anything.acall()

    assert answer.call() == 42 and async_accept_anything.call() is None
    assert asyncio.run(in_a_loop()) == (42, None)


def test_the_decorator_refuses_what_cannot_be_a_task() -> None:
    from pgq.contrib.django._tasks import task
    from tests.djangotasks.contract_tasks import answer

    def local() -> None:
        """Defined in a function: no module path leads to it."""

    invalid = api("InvalidTask")
    for function in (len, local):
        with pytest.raises(invalid, match="Task function must be defined at a module level"):
            task()(function)  # type: ignore[arg-type]
    with pytest.raises(invalid, match="Task takes context but does not have a first argument of 'context'"):
        task(takes_context=True)(answer.func)  # type: ignore[arg-type]


def assert_ready(result: Any, task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """`result` is `task`'s, just enqueued with `args` and `kwargs`: READY, never attempted."""
    from pgq.contrib.django._tasks import TaskResultStatus

    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.started_at is None and result.last_attempted_at is None and result.finished_at is None
    assert result.enqueued_at is not None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert (result.task, result.args, result.kwargs) == (task, args, kwargs)
    assert (result.attempts, result.errors, result.worker_ids) == (0, [], [])


@pytest.mark.parametrize("name", ["accept_anything", "async_accept_anything", "own_id"])
def test_enqueue_returns_a_ready_unstarted_result(backend: Any, name: str) -> None:
    from pgq.contrib.django import PgqBackend
    from tests.djangotasks import contract_tasks

    task = getattr(contract_tasks, name)
    with enqueue_signals() as received:
        result = task.enqueue(1, two=3) if name != "own_id" else task.enqueue()
    assert_ready(result, task, [1] if name != "own_id" else [], {"two": 3} if name != "own_id" else {})
    assert received == [(PgqBackend, result)]


@pytest.mark.parametrize("name", ["accept_anything", "async_accept_anything"])
def test_aenqueue_returns_a_ready_unstarted_result(backend: Any, name: str) -> None:
    from pgq.contrib.django import PgqBackend
    from tests.djangotasks import contract_tasks

    task = getattr(contract_tasks, name)
    with enqueue_signals() as received:
        result = asyncio.run(task.aenqueue())
    assert_ready(result, task, [], {})
    assert received == [(PgqBackend, result)]


def test_an_argument_json_cannot_hold_is_refused(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import accept_anything

    with pytest.raises(TypeError, match=r"Unsupported type: <class 'datetime\.datetime'>"):
        accept_anything.enqueue(dt.datetime.now(dt.UTC))
    with pytest.raises(TypeError, match=r"Unsupported type: <class 'datetime\.datetime'>"):
        asyncio.run(accept_anything.aenqueue(dt.datetime.now(dt.UTC)))
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_get_result_reads_back_an_equal_result(backend: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.djangotasks.contract_tasks import accept_anything

    result = backend.enqueue(accept_anything, (), {})
    with CaptureQueriesContext(connection) as captured:
        assert backend.get_result(result.id) == result
    assert len(captured.captured_queries) == 1
    assert accept_anything.get_result(result.id) == result

    async def in_a_loop() -> tuple[Any, Any, Any]:
        enqueued = await backend.aenqueue(accept_anything, [], {})
        return enqueued, await backend.aget_result(enqueued.id), await accept_anything.aget_result(enqueued.id)

    enqueued, read, through_task = asyncio.run(in_a_loop())
    assert read == enqueued and through_task == enqueued


def test_a_missing_or_malformed_id_has_no_result(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultDoesNotExist
    from tests.djangotasks.contract_tasks import accept_anything

    for missing in ("123", "9223372036854775807", "9223372036854775808", "-1", "abc", ""):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(missing)
        with pytest.raises(TaskResultDoesNotExist):
            accept_anything.get_result(missing)
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(backend.aget_result(missing))
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(accept_anything.aget_result(missing))


def test_the_result_of_another_task_is_a_mismatch(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import accept_anything, async_accept_anything

    result = backend.enqueue(async_accept_anything, (), {})
    mismatch = api("TaskResultMismatch")
    with pytest.raises(mismatch, match="Task does not match"):
        accept_anything.get_result(result.id)
    with pytest.raises(mismatch, match="Task does not match"):
        asyncio.run(accept_anything.aget_result(result.id))


def test_refreshing_a_ready_result_changes_nothing(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import accept_anything

    result = asyncio.run(accept_anything.aenqueue())
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before
    asyncio.run(result.arefresh())
    assert dataclasses.asdict(result) == before


def test_enqueue_logs_one_line(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    from pgq.contrib.django._tasks import SOURCE
    from tests.djangotasks.contract_tasks import accept_anything

    with caplog.at_level(logging.DEBUG, logger=SOURCE):
        result = accept_anything.enqueue()
    [line] = [r.getMessage() for r in caplog.records if r.name == SOURCE]
    assert "enqueued" in line and result.id in line


def test_an_async_task_is_refused_where_unsupported(backend: Any) -> None:
    from tests.djangotasks.contract_tasks import async_accept_anything

    backend.validate_task(async_accept_anything)
    with mock.patch.object(backend, "supports_async_task", False), \
            pytest.raises(api("InvalidTask"), match=r"Backend does not support async [Tt]asks"):
        backend.validate_task(async_accept_anything)


def test_check_finds_nothing_wrong(backend: Any) -> None:
    assert list(backend.check()) == []


def test_enqueue_checks_the_queue_against_the_backend(backend: Any) -> None:
    from django.test import override_settings

    from tests.djangotasks.contract_tasks import accept_anything

    wider = {**other_backends()["default"], "QUEUES": ["default", "mail", "gone"]}
    with override_settings(TASKS=other_backends(default=wider)):
        elsewhere = accept_anything.using(queue_name="gone")  # valid while the backend names it
    invalid = api("InvalidTask")
    with pytest.raises(invalid, match="Queue 'gone' is not valid for backend"):
        elsewhere.enqueue()
    with pytest.raises(invalid, match="Queue 'gone' is not valid for backend"):
        asyncio.run(elsewhere.aenqueue())
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_an_enqueue_is_seen_elsewhere_only_once_committed(backend: Any) -> None:
    from django.db import transaction

    from tests.djangotasks.contract_tasks import accept_anything

    def seen_elsewhere() -> int:
        with psycopg.connect(backend.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()
        assert row is not None
        return int(row[0])

    with transaction.atomic():
        result = accept_anything.enqueue()
        assert result.enqueued_at is not None
        assert accept_anything.get_result(result.id) == result  # this connection sees it
        assert seen_elsewhere() == 0
    assert seen_elsewhere() == 1


def test_run_after_stays_none_with_or_without_time_zones(backend: Any) -> None:
    from django.test import override_settings

    from tests.djangotasks.contract_tasks import accept_anything

    for use_tz in (True, False):
        with override_settings(USE_TZ=use_tz):
            result = accept_anything.enqueue()
            assert accept_anything.get_result(result.id).task.run_after is None


def test_a_job_that_is_no_task_has_no_result(backend: Any) -> None:
    from pgq.contrib.django._tasks import TaskResultDoesNotExist

    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        ids = [conn.execute("SELECT pgq.enqueue(%s, %s::jsonb)", (kind, json.dumps(payload))).fetchone()[0]
               for kind, payload in (("subprocess.check_output", {"args": [["exit", "1"]], "kwargs": {}}),
                                     ("no_such_module.func", {"args": [], "kwargs": {}}))]
    for job_id in ids:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(str(job_id))


def test_views_enqueue_and_read_results_across_requests(backend: Any) -> None:
    from django.test import Client

    from pgq.contrib.django._tasks import TaskResultStatus

    client = Client()
    ids = []
    for url in ("/contract/answer", "/contract/answer-async"):
        response = client.get(url)
        assert response.status_code == 200, response.content[:500]
        data = response.json()
        assert (data["status"], data["result"]) == (TaskResultStatus.READY, None)
        assert backend.get_result(data["result_id"]).status == TaskResultStatus.READY
        again = client.get(f"/contract/result/{data['result_id']}")
        assert again.json() == {"result_id": data["result_id"], "result": None, "status": TaskResultStatus.READY}
        ids.append(data["result_id"])
    run(backend)
    for result_id in ids:
        done = client.get(f"/contract/result/{result_id}").json()
        assert done == {"result_id": result_id, "result": 42, "status": TaskResultStatus.SUCCESSFUL}
