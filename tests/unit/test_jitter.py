"""pgq's jitter comes from its own generator (pgq._jitter), never from the `random` module's global one,
which belongs to the application (tests/worker/test_global_random.py runs a worker to show it)."""

from __future__ import annotations

import ast
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pgq
from pgq._jitter import JITTER, exponential_wait

ROOT = Path(pgq.__file__).resolve().parent


def global_random_uses(tree: ast.AST) -> list[str]:
    """What in `tree` draws from the global generator: `random.<function>` other than `random.Random`,
    `from random import <function>`, and tenacity's random waits (which call the module's functions)."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "random" and node.attr != "Random"):
            found.append(f"line {node.lineno}: random.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "random":
            found += [f"line {node.lineno}: from random import {a.name}" for a in node.names if a.name != "Random"]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("wait_random"):
            found.append(f"line {node.lineno}: {node.attr}")
    return found


def test_no_module_of_pgq_draws_from_the_global_random() -> None:
    uses = {str(p.relative_to(ROOT)): global_random_uses(ast.parse(p.read_text())) for p in sorted(ROOT.rglob("*.py"))}
    assert {path: found for path, found in uses.items() if found} == {}


def test_the_check_sees_each_way_of_drawing_from_the_global_random() -> None:
    source = ("import random\nfrom random import uniform\nimport tenacity\nrandom.random()\n"
              "w = tenacity.wait_random_exponential(1)\nr = random.Random()\n")
    assert global_random_uses(ast.parse(source)) == [
        "line 2: from random import uniform", "line 4: random.random", "line 5: wait_random_exponential"]


def test_exponential_wait_draws_within_the_doubling_bound_from_pgqs_generator() -> None:
    wait = exponential_wait(0.25, minimum=0.1, maximum=10.0)
    before = random.getstate()
    for attempt in range(1, 80):
        high = max(0.1, min(0.25 * 2 ** (attempt - 1), 10.0))
        state: Any = SimpleNamespace(attempt_number=attempt)
        delays = [wait(state) for _ in range(50)]
        assert all(0.1 <= d <= high for d in delays), (attempt, delays)
        assert max(delays) > 0.1 + (high - 0.1) / 2  # spread over the range, not pinned to an end
    assert random.getstate() == before  # the global generator untouched
    assert isinstance(JITTER, random.Random) and JITTER is not random._inst  # type: ignore[attr-defined]
