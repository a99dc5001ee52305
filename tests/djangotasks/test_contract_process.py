"""Django's task contract for worker processes: `manage.py pgq_worker` subprocesses running the
contract tasks (settings_contract.py), written for PgqBackend from the behaviours that
django-tasks-db 0.12.0's DatabaseWorkerProcessTestCase tests on its `db_worker`.

Which upstream tests each test covers:

- test_workers_run_tasks_and_outlive_the_tasks_exits: test_run_subprocess, test_multiple_workers,
  test_system_exit_task, test_keyboard_interrupt_task
- test_a_stop_signal_lets_the_running_task_finish: test_interrupt_signals, test_interrupt_no_tasks
- test_a_second_ctrl_c_fails_the_running_task: test_repeat_ctrl_c (xfail: pgq hands the task back,
  docs/django.md; test_worker_command.py pins what pgq does)
- test_a_killed_worker_leaves_its_task_running: test_kill (until the lease expires, when pgq hands
  the task to another worker)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ..conftest import reap

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def start_worker(backend: Any) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `manage.py pgq_worker` on the contract tasks with extra arguments; every process is
    killed and reaped after the test."""
    started: list[subprocess.Popen[str]] = []
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.djangotasks.settings_contract",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "tests.djangotasks.manage", "pgq_worker",
                                 "--poll-interval", "0.2", *args],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            reap(proc)


def wait_for(condition: Callable[[], bool], procs: list[subprocess.Popen[str]], timeout: float = 60) -> None:
    """Poll `condition` until it holds; fail if a worker exits first or `timeout` s pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        for proc in procs:
            assert proc.poll() is None, proc.communicate(timeout=10)
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def registered(proc: subprocess.Popen[str]) -> bool:
    """Whether the worker process has registered in pgq.workers (it is then running)."""
    with psycopg.connect(os.environ["PGQ_DJANGO_DSN"], autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pgq.workers WHERE pid = %s", (proc.pid,)).fetchone() is not None


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Send `sig` to the worker, which must then exit 0 within 30 s; its output."""
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def test_workers_run_tasks_and_outlive_the_tasks_exits(start_worker: Callable[..., Any]) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import exits_with_message, interrupted_with_message, pause

    naps = [pause.enqueue(0.1) for _ in range(10)]
    exited, interrupted = exits_with_message.enqueue(), interrupted_with_message.enqueue()
    everything = [*naps, exited, interrupted]
    workers = [start_worker("--concurrency", "2") for _ in range(3)]

    def finished() -> bool:
        for result in everything:
            result.refresh()
        return all(result.is_finished for result in everything)

    wait_for(finished, workers)
    output = "".join(stop(worker) for worker in workers)
    assert all(result.status == TaskResultStatus.SUCCESSFUL for result in naps)
    for result, raised in ((exited, SystemExit), (interrupted, KeyboardInterrupt)):
        assert result.status == TaskResultStatus.FAILED
        assert [error.exception_class for error in result.errors] == [raised]
    for result in naps:  # each ran once, on one of the workers: RUNNING, then SUCCESSFUL
        assert output.count(f"Task id={result.id} ") == 2, output


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_lets_the_running_task_finish(start_worker: Callable[..., Any], sig: int) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import pause

    idle = start_worker()
    wait_for(lambda: registered(idle), [idle])
    began = time.monotonic()
    stop(idle, sig)  # nothing to finish: it exits at once
    assert time.monotonic() - began < 10

    result = pause.enqueue(2)
    assert result.worker_ids == []
    worker = start_worker("--worker-id", "w-1")
    wait_for(lambda: pause.get_result(result.id).status == TaskResultStatus.RUNNING, [worker])
    assert pause.get_result(result.id).worker_ids == ["w-1"]
    stop(worker, sig)
    done = pause.get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 2)


@pytest.mark.xfail(strict=True, reason="docs/django.md, 'A second Ctrl-C': pgq hands the running task "
                                        "back to the queue instead of failing it with SystemExit")
def test_a_second_ctrl_c_fails_the_running_task(start_worker: Callable[..., Any]) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import pause

    result = pause.enqueue(300)
    worker = start_worker()
    wait_for(lambda: pause.get_result(result.id).status == TaskResultStatus.RUNNING, [worker])
    worker.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert worker.poll() is None and pause.get_result(result.id).status == TaskResultStatus.RUNNING
    stop(worker, signal.SIGINT)
    failed = pause.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in failed.errors] == [SystemExit]


def test_a_killed_worker_leaves_its_task_running(start_worker: Callable[..., Any]) -> None:
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.contract_tasks import pause

    result = pause.enqueue(300)
    worker = start_worker()
    wait_for(lambda: pause.get_result(result.id).status == TaskResultStatus.RUNNING, [worker])
    worker.kill()
    worker.wait(timeout=10)
    assert worker.returncode == -signal.SIGKILL
    assert pause.get_result(result.id).status == TaskResultStatus.RUNNING
