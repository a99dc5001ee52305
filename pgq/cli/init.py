"""`pgq init [DIR]`: write a minimal project to start from: a tasks module, a worker command and a
test of the task that runs on pgq's pytest plugin."""

from __future__ import annotations

import argparse
import keyword
import stat
from pathlib import Path

from .common import EXIT_OK, EXIT_USAGE, CliError, Commands, Formatter

__all__ = ["files_of", "register"]

_TASKS = '''"""The tasks of this project: `pgq worker {module}:app` runs them (see worker.sh)."""

import os

import pgq

# "" leaves the database to libpq's defaults; PGQ_DSN, or `pgq worker --dsn`, names it.
app = pgq.App(os.environ.get("PGQ_DSN", ""))


@app.task(max_attempts=5)
def send_welcome(email: str) -> dict[str, str]:
    """A job's payload arrives as keyword arguments; the return value is stored as its result."""
    return {{"sent_to": email}}
'''

_WORKER = '''#!/bin/sh
# Runs a worker for {module}.py's tasks until SIGTERM or Ctrl-C (which let running jobs finish).
# PGQ_DSN names the database; run `pgq migrate` on it once first. Extra arguments go to the worker,
# e.g. ./worker.sh --concurrency 16 --queue default
exec pgq worker {module}:app "$@"
'''

_TEST = '''"""{module}.py's task on a real PostgreSQL: pgq's pytest plugin (pip install "pgq-jobs[test]")
gives each test a migrated database (`pgq_dsn`) on PGQ_TEST_DSN's server, else Docker's, else an
embedded one. Run: pytest test_{module}.py"""

import pgq
from pgq.testing import assert_enqueued, drain

from {module} import app, send_welcome


def test_send_welcome_stores_its_result(pgq_dsn: str) -> None:
    with pgq.Queue(pgq_dsn, app=app) as queue:
        [job_id] = queue.enqueue_many([send_welcome.spec(email="ada@example.com")])
        assert_enqueued(queue, send_welcome, email="ada@example.com")
        [job] = drain(app, queue)  # runs it here, through pgq's own claim and acknowledgement
    assert job.id == job_id and job.result == {{"sent_to": "ada@example.com"}}
'''


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (it connects to no database: `dsn` is unused)."""
    p = commands.add_parser(
        "init",
        formatter_class=Formatter,
        help="write a minimal project: tasks module, worker command, a test",
        description=(
            "Write a minimal pgq project into DIR: MODULE.py (an App and one task), worker.sh (runs\n"
            "`pgq worker MODULE:app`) and test_MODULE.py (the task run by pgq.testing.drain on a\n"
            "database of pgq's pytest plugin: `pytest test_MODULE.py`). Nothing is overwritten: an\n"
            "existing file stops it (exit 2) before anything is written."
        ),
    )
    p.add_argument("dir", metavar="DIR", nargs="?", default=".", help="where to write (default: the current directory)")
    p.add_argument("--module", metavar="NAME", default="tasks", help="the tasks module's name (default: tasks)")
    p.set_defaults(handler=cmd_init)


def files_of(module: str) -> dict[str, str]:
    """The files `pgq init` writes for tasks module `module`, by name."""
    return {f"{module}.py": _TASKS.format(module=module), "worker.sh": _WORKER.format(module=module),
            f"test_{module}.py": _TEST.format(module=module)}


def cmd_init(args: argparse.Namespace) -> int:
    """`pgq init`: check the module name and that no file exists, then write the files; list them."""
    module = args.module
    if not module.isidentifier() or keyword.iskeyword(module) or module in ("pgq", "test"):
        raise CliError(f"--module must be a Python module name other than pgq and test, got {module!r}", EXIT_USAGE)
    root = Path(args.dir)
    files = files_of(module)
    existing = [name for name in files if (root / name).exists()]
    if existing:
        raise CliError(f"{', '.join(existing)} already in {root}: nothing written", EXIT_USAGE)
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    script = root / "worker.sh"
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for name in files:
        print(root / name)
    print(f"next: pytest {root / f'test_{module}.py'}; then `pgq migrate` and ./worker.sh with PGQ_DSN set")
    return EXIT_OK
