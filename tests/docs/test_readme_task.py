"""The README's `myapp/tasks.py`, as a reader copies it: it passes `mypy --strict`, and imports
without PGQ_DSN so that `pgq worker myapp.tasks:app --dsn ...` alone is enough."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

README = Path(__file__).resolve().parents[2] / "README.md"
ROOT = README.parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding the README's myapp/tasks.py (and an empty myapp/__init__.py)."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
               if b.startswith("# myapp/tasks.py")]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(block)
    return tmp_path


def test_the_readme_task_runs_on_a_worker_given_only_dsn(project: Path, pgq_dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # --connect-wait 0 and a database that refuses: it got as far as connecting (no KeyError on import).
    missing = make_conninfo(pgq_dsn, dbname="pgq_readme_missing")
    result = subprocess.run([sys.executable, "-m", "pgq", "worker", "myapp.tasks:app", "--dsn", missing,
                             "--connect-wait", "0"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert "KeyError" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("pgq: error: cannot connect to the database"), \
        result.stderr


@pytest.mark.slow
def test_the_readme_task_passes_mypy_strict(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                             "myapp/tasks.py"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
