"""The built wheel carries its SQL and alembic environment, and migrates a database from a fresh venv."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgq import migrate
from pgq.testing import Server

# One process of a parallel run builds the wheel and its venv once for the module (module fixtures).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]

REPO = Path(__file__).resolve().parents[2]

# Run in the venv, isolated (-I: no cwd, no PYTHONPATH, no user site), so nothing of the checkout leaks in.
REPORT = """
import json, sys
import pgq, pgq._sql, pgq.migrate
pgq.migrate.upgrade(sys.argv[1])
print(json.dumps({
    "package": pgq.__file__,
    "sql": str(pgq._sql.data_dir("sql")),
    "alembic": str(pgq._sql.data_dir("alembic")),
    "head": pgq.migrate.head_revision(),
}))
"""


def run(*args: str | Path, cwd: Path) -> str:
    """Run a command; fail the test with its output when it fails. Returns its stdout."""
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}", pytrace=False)
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build pgq's wheel from the checkout (build backend fetched from the package index)."""
    pytest.importorskip("build")
    outdir = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", outdir, REPO, cwd=outdir)
    (built,) = outdir.glob("pgq_jobs-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv (no access to this one's packages) with the wheel and its dependencies installed."""
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root)
    python = root / "bin" / "python"
    # This environment's pip installs into the new venv: faster than bootstrapping pip there.
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", wheel, cwd=root)
    return root


@pytest.fixture
def second_empty_dsn(pgq_server: Server) -> Iterator[str]:
    """One more empty database, dropped afterwards."""
    with pgq_server.scratch_database("pgq_e_") as dsn:
        yield dsn


def test_wheel_contains_sql_and_alembic_environment(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    assert "pgq/_data/alembic/env.py" in names
    assert "pgq/_data/alembic/script.py.mako" in names
    for path in (REPO / "alembic" / "versions").glob("*.py"):
        assert f"pgq/_data/alembic/versions/{path.name}" in names
    for path in (REPO / "sql").rglob("*.sql"):
        assert f"pgq/_data/{path.relative_to(REPO).as_posix()}" in names
    assert any(n.startswith("pgq/_data/sql/schema/") and n.endswith(".up.sql") for n in names)
    assert "pgq/py.typed" in names
    assert not any("__pycache__" in n for n in names)


def test_wheel_contains_the_dashboards_templates_and_static_files(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    web = REPO / "pgq" / "web"
    shipped = [p for p in (*web.glob("templates/*.html"), *web.glob("static/*")) if p.is_file()]
    assert len(shipped) >= 12
    for path in shipped:
        assert f"pgq/{path.relative_to(REPO / 'pgq').as_posix()}" in names
    assert {"pgq/web/static/app.css", "pgq/web/static/app.js", "pgq/web/templates/base.html"} <= names


def test_installed_cli_without_the_web_extra_says_what_to_install(venv: Path, pgq_dsn: str) -> None:
    result = subprocess.run([venv / "bin" / "pgq", "dashboard", "--dsn", pgq_dsn], cwd=venv, capture_output=True,
                            text=True, timeout=60)

    assert result.returncode == 1
    assert result.stderr.startswith("pgq: error: the pgq dashboard needs the web extra (")
    assert result.stderr.rstrip().endswith("pip install 'pgq-jobs[web]'")


def test_installed_wheel_migrates_from_its_own_files(venv: Path, pgq_empty_dsn: str) -> None:
    output = run(venv / "bin" / "python", "-I", "-c", REPORT, pgq_empty_dsn, cwd=venv)

    report = json.loads(output)  # also proves migrating printed nothing else on stdout
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    for key in ("package", "sql", "alembic"):
        assert Path(report[key]).is_relative_to(site_packages), report
    assert report["head"] == migrate.head_revision()
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()
    with psycopg.connect(pgq_empty_dsn) as conn:
        assert conn.execute("SELECT to_regclass('pgq.jobs') IS NOT NULL").fetchone() == (True,)


def test_installed_cli_migrates(venv: Path, wheel: Path, second_empty_dsn: str) -> None:
    assert "pgq/cli/__init__.py" in zipfile.ZipFile(wheel).namelist()

    run(venv / "bin" / "pgq", "migrate", "--dsn", second_empty_dsn, cwd=venv)

    assert migrate.current_revision(second_empty_dsn) == migrate.head_revision()
