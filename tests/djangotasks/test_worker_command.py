"""`manage.py pgq_worker` has `pgq worker`'s options and defaults, and starts quietly on a project
whose QUEUES name queues its tasks do not default to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from ..conftest import reap

ROOT = Path(__file__).resolve().parents[2]


def test_pgq_worker_has_every_option_of_pgq_worker(django_dsn: str) -> None:
    from django.core.management import load_command_class

    from pgq.cli import build_parser

    command = load_command_class("pgq.contrib.django", "pgq_worker")
    ours = {o for a in command.create_parser("manage.py", "pgq_worker")._actions for o in a.option_strings}
    worker = build_parser()._subparsers._group_actions[0].choices["worker"]  # type: ignore[union-attr]
    theirs = {o for a in worker._actions for o in a.option_strings} - {"--dsn", "--pgbouncer"}
    assert theirs <= ours, theirs - ours
    assert {"--worker-id", "--log-level", "--drain-timeout", "--metrics-port", "--quiet", "--backend"} <= ours


def test_pgq_worker_runs_with_pgq_worker_s_defaults_a_worker_id_and_no_warning(django_dsn: str) -> None:
    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs")
    from tests.djangotasks.shop.tasks import mail

    result = mail.enqueue(to="ada@example.com")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.djangotasks.manage", "pgq_worker", "--worker-id", "dj-1",
                             "--poll-interval", "0.2", "--drain-timeout", "2",  # spare: no task's default queue
                             "--queue", "default", "--queue", "mail", "--queue", "spare"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not mail.get_result(result.id).is_finished:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert "queues default, mail, spare, concurrency 10" in out  # pgq worker's default, not 4
    finished = mail.get_result(result.id)
    assert finished.return_value == "mailed ada@example.com" and finished.worker_ids == ["dj-1"]
    assert " WARNING " not in err and " ERROR " not in err, err
    assert f"job {result.id} tests.djangotasks.shop.tasks.mail attempt 1/1: succeeded" in err, err
    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs")


def test_a_second_ctrl_c_hands_the_running_task_back_as_documented(django_dsn: str) -> None:
    """docs/django.md: the first SIGINT drains, the second aborts and hands the task back to the queue
    (READY again, to run on the next worker) instead of failing it with SystemExit as
    django-tasks-db's worker does."""
    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.shop.tasks import nap

    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs")
    result = nap.enqueue(60)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.djangotasks.manage", "pgq_worker", "--poll-interval", "0.2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while nap.get_result(result.id).status != TaskResultStatus.RUNNING:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None and nap.get_result(result.id).status == TaskResultStatus.RUNNING  # draining
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        reap(proc)
    after = nap.get_result(result.id)
    assert after.status == TaskResultStatus.READY and after.errors == [], err  # handed back, not failed
    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs")
