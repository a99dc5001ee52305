#!/usr/bin/env python3
"""Set-up and entry points for working on pgq, needing nothing but Python 3.11+.

    python3 dev.py demo [ARGS...]   run `pgq demo` (an embedded PostgreSQL unless PGQ_DSN is set)
    python3 dev.py test [ARGS...]   ruff, mypy --strict, the docs (mkdocs build --strict), then the
                                    whole test suite (ARGS go to pytest; --no-lint skips the checks)

Both create the virtualenv `.venv` next to this file on first use and install pgq into it
(editable, with its test and dev extras); they reinstall when pyproject.toml changes. Tests use
PGQ_TEST_DSN when set, else a Docker engine if one answers, else an embedded PostgreSQL.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("PGQ_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".pgq-installed"


def say(message: str) -> None:
    print(f"[dev] {message}", flush=True)


def run(*args: str | Path, env: dict[str, str] | None = None) -> int:
    say("$ " + " ".join(str(a) for a in args))
    return subprocess.call([str(a) for a in args], cwd=ROOT, env=env)


def ensure_venv() -> None:
    """Create .venv and install pgq[dev] into it, unless it is already current."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        say(f"creating virtualenv {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    say("installing pgq with its test and dev dependencies (first run: about a minute)")
    quiet = ["-q", "--disable-pip-version-check"]
    if run(PYTHON, "-m", "pip", "install", *quiet, "--upgrade", "pip") != 0:
        sys.exit("dev: could not upgrade pip in the virtualenv")
    if run(PYTHON, "-m", "pip", "install", *quiet, "-e", ".[dev]") != 0:
        sys.exit("dev: installing pgq failed (see pip's output above)")
    STAMP.write_text(wanted)


def cmd_test(args: list[str]) -> int:
    """Lint, type-check, build the docs and run the whole suite; non-zero if anything fails."""
    lint = "--no-lint" not in args
    args = [a for a in args if a != "--no-lint"]
    ensure_venv()
    if lint:
        if run(BIN / "ruff", "check", "pgq", "tests", "alembic", "bench", "dev.py") != 0:
            return 1
        if run(BIN / "mypy") != 0:
            return 1
        if build_docs() != 0:
            return 1
    where = os.environ.get("PGQ_TEST_DSN") or "an embedded or Docker PostgreSQL (PGQ_TEST_DSN not set)"
    say(f"running the test suite against {where}")
    return run(PYTHON, "-m", "pytest", *args)


def build_docs() -> int:
    """Build the docs site strictly (any warning fails) into a temporary directory, then drop it."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's end-of-life banner
    # No --quiet: it silences warnings before --strict counts them, and the build then passes.
    with tempfile.TemporaryDirectory(prefix="pgq-docs-") as site:
        return run(BIN / "mkdocs", "build", "--strict", "--site-dir", site, env=env)


def cmd_demo(args: list[str]) -> int:
    """Run the demo: producer and workers, printing what happened."""
    ensure_venv()
    return run(PYTHON, "-m", "pgq", "demo", *args)


def main() -> int:
    commands = {"test": cmd_test, "demo": cmd_demo}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__)
        return 2
    return commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
