"""dev.py's choices: what `dev.py test` runs by default and with --all, and which installs serve
which command (the demo installs only what it needs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pgq_dev_script", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pgq_dev_script", module)
    spec.loader.exec_module(module)
    return module


def test_the_default_tier_leaves_out_slow_faults_and_browser_tests(dev: ModuleType) -> None:
    parallel = ["-n", str(dev.WORKERS), "--dist", "loadgroup"]
    assert dev.pytest_arguments([]) == (
        True, "the default tier", [*parallel, "-m", "not slow and not faults and not browser"])
    assert dev.pytest_arguments(["--no-lint", "-k", "claim"]) == (
        False, "the default tier", [*parallel, "-m", dev.DEFAULT_TIER, "-k", "claim"])
    assert dev.pytest_arguments(["--all", "-x"]) == (True, "the whole test suite", [*parallel, "-x"])
    assert dev.pytest_arguments(["-m", "not slow"]) == (True, "the tests you selected", [*parallel, "-m", "not slow"])
    assert dev.pytest_arguments(["-mslow"])[2] == [*parallel, "-mslow"]


def test_the_suite_runs_in_parallel_unless_the_caller_says_how_many_processes(dev: ModuleType) -> None:
    assert dev.WORKERS >= 2
    for own in (["-n", "0"], ["-n0"], ["-n", "auto"], ["--numprocesses", "2"], ["--numprocesses=2"]):
        assert dev.pytest_arguments(["--all", *own]) == (True, "the whole test suite", own), own
    assert dev.MATRIX_TESTS[:2] == ["-n", "0"]  # one process a version: the versions run side by side


def test_every_marker_of_the_suite_is_in_the_default_tier_or_named_by_it(dev: ModuleType) -> None:
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} <= {"slow", "faults", "browser"}, "a new marker: tier it in dev.py"


def test_a_demo_install_serves_the_demo_only_and_a_dev_install_everything(dev: ModuleType) -> None:
    enough = dev.installed_enough
    assert enough(["h", "dev"], "h", "dev", False) and enough(["h"], "h", "demo", True)
    assert enough(["h", "demo+embedded"], "h", "demo", True) and enough(["h", "demo"], "h", "demo", False)
    assert not enough(["h", "demo"], "h", "demo", True)  # no embedded server: install it
    assert not enough(["h", "demo+embedded"], "h", "dev", False)  # the first `dev.py test` adds the tools
    assert not enough(["old", "dev"], "h", "demo", False) and not enough([], "h", "demo", False)
