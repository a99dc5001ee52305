"""Helpers for the command-line tests: run `pgq` in-process (through `pgq.cli.main`) or as a subprocess."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pgq.cli import main

from ..conftest import SQL as SQL  # re-exported for the CLI tests


@dataclass(frozen=True)
class Result:
    """What one run of the command line did."""

    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        """The non-empty lines written to stderr."""
        return [line for line in self.err.splitlines() if line.strip()]


CLI = Callable[..., Result]


@pytest.fixture(autouse=True)
def _no_ambient_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PGQ_DSN of the developer's shell must never leak into a test."""
    monkeypatch.delenv("PGQ_DSN", raising=False)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[CLI]:
    """Run `pgq ARGS...` in-process and return its exit status and captured output. The root
    logger's handlers and level (which `pgq worker` sets) are put back after the test, so that no
    later test's threads log through them."""

    def run(*args: str) -> Result:
        capsys.readouterr()  # drop whatever an earlier step printed
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield run
    root.handlers[:] = handlers
    root.setLevel(level)


def run_subprocess(*args: str, env: dict[str, str] | None = None, cwd: str | None = None,
                   timeout: float = 60) -> Result:
    """Run `python -m pgq ARGS...` in a child process (PGQ_DSN removed unless `env` sets it)."""
    child_env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "pgq", *args], capture_output=True, text=True,
                          env=child_env, cwd=cwd, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def table(text: str) -> dict[str, dict[str, str]]:
    """Parse an aligned table printed by the CLI into {first cell: {header: cell}}.

    Cells are separated by two or more spaces; headers may contain single spaces.
    """
    import re

    lines = [line for line in text.splitlines() if line.strip()]
    headers = re.split(r"\s{2,}", lines[0].strip())
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = dict(zip(headers, cells, strict=False))
    return rows
