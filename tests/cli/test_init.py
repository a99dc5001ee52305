"""`pgq init` writes a project whose own test passes (run by pytest as the reader runs it, with pgq's
plugin, on the test server: PGQ_TEST_DSN, or the embedded one when unset) and overwrites nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import CLI

ROOT = Path(__file__).resolve().parents[2]


def test_init_writes_a_project_whose_test_passes(cli: CLI, tmp_path: Path, pgq_server_dsn: str) -> None:
    project = tmp_path / "shop"
    result = cli("init", str(project), "--module", "jobs")
    assert result.code == 0, result.err
    assert sorted(p.name for p in project.iterdir()) == ["jobs.py", "test_jobs.py", "worker.sh"]
    script = project / "worker.sh"
    assert os.access(script, os.X_OK) and "exec pgq worker jobs:app" in script.read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PGQ_TEST_DSN": pgq_server_dsn, "PGQ_TEST_DOCKER": "0"}
    env.pop("PGQ_DSN", None)
    # pgq's plugin loads through its entry point, as in the reader's project; Hypothesis', which this
    # venv has and the project does not use, is left out: importing it was half the child's CPU time.
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                          "test_jobs.py"], cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_init_overwrites_nothing_and_checks_the_module_name(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("mine\n")
    result = cli("init", str(tmp_path))
    assert result.code == 2 and "tasks.py already in" in result.err and len(result.err_lines) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.py"]
    assert (tmp_path / "tasks.py").read_text() == "mine\n"
    assert cli("init", str(tmp_path / "x"), "--module", "my-tasks").code == 2
    assert not (tmp_path / "x").exists()
