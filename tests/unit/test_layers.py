"""The import structure of pgq: no import circles between its modules, and every import goes down the
layering (models and SQL loading, sans-I/O operations, client, tasks and app, worker, command line)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import pgq

ROOT = Path(pgq.__file__).resolve().parent

# Layers, bottom-up: a module may import modules of its own layer or below, never above. A package
# name stands for all its modules. Imports inside functions count too (a lazy import is still an
# import of that module).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pgq.errors", "pgq.bounds", "pgq.models", "pgq.insight", "pgq._sql", "pgq._schema", "pgq._jitter"),
    ("pgq._ops", "pgq.cron", "pgq.context", "pgq.migrate", "pgq.roles", "pgq.role_sets", "pgq.embedded",
     "pgq.listener"),
    ("pgq.client", "pgq.waiting", "pgq.metrics", "pgq.retries"),
    ("pgq.tasks", "pgq.app"),
    ("pgq.worker", "pgq.testing", "pgq.otel"),
    ("pgq.cli", "pgq.web", "pgq.contrib"),
    ("pgq", "pgq.__main__"),
)


def module_name(path: Path) -> str:
    """The dotted name of the module in file `path` under pgq/."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: Iterable[str]) -> set[str]:
    """The pgq modules that the module in `path` imports (resolving relative imports; `from x import
    y` counts as an import of x.y when that is a module, else of x)."""
    known = set(modules)
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "pgq")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pgq":
                continue
            subs = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
            found.update(subs or [target])
    found.discard(name)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    """{module: the pgq modules it imports} for every module of the installed package."""
    paths = sorted(ROOT.rglob("*.py"))
    names = [module_name(p) for p in paths]
    return {module_name(p): imports_of(p, names) for p in paths}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (each an import circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str) -> int:
    """The index in LAYERS of the most specific entry naming `module` or one of its packages."""
    best, depth = -1, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth:
                best, depth = i, name.count(".")
    return best


def test_the_checker_finds_circles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_pgq_has_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_every_module_has_a_layer() -> None:
    assert [m for m in graph() if layer_of(m) < 0] == []


def test_imports_go_down_the_layers() -> None:
    upward = sorted(f"{m} ({layer_of(m)}) imports {i} ({layer_of(i)})"
                    for m, targets in graph().items() for i in targets
                    if layer_of(i) > layer_of(m) and not (m == "pgq" or i.startswith(m + ".")))
    assert upward == []


@pytest.mark.parametrize("module", ["pgq.worker.worker", "pgq.cli"])
def test_the_graph_sees_real_imports(module: str) -> None:
    # Guards the checker itself: modules known to import others must show edges.
    assert graph()[module]
