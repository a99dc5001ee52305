"""Every ```python block of README.md and docs/*.md runs, against a real database.

Each page is one test: its blocks run in order in one namespace (a reader follows a page from top to
bottom), seeded with the few names the page says the reader provides (READER_PROVIDES below). A block
whose first line names a module (`# myapp/tasks.py`) is run as that module, importable by the blocks
after it, and its names are visible to them too. While a page runs, every `pgq.App` its blocks create
has a real worker running its tasks (restarted when the page adds a task; none on the OWN_WORKERS
pages, whose blocks start the worker they wait for, as a reader must); at the end of the page the
jobs of those tasks must all have run without an error (a producer that enqueues a payload its own
task rejects fails here). A block that defines `test_*` functions (docs/testing.md) has them called
with the pytest fixtures they name.

A block that cannot run here says so with `<!-- not-run: reason -->` on the line before it; the
list of such blocks is pinned in NOT_RUN, so none is skipped silently.

On the pages of SQL_PAGES, the ```sql blocks run too, in page order between the python blocks, each
in one autocommit session on the test database (the jobs they enqueue are run by the page's workers
and checked like the others). The other pages' sql blocks are psql snippets about jobs of the
reader's own (`pgq.explain(4242)`) or psql commands, not run.
"""

from __future__ import annotations

import inspect
import re
import sys
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import pgq

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python|sql)\n(.*?)^```\s*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
MODULE_LINE = re.compile(r"#\s*([A-Za-z_][\w/]*)\.py\s*$")

# (page, reason) of each block marked not-run: a new marker must be added here, visibly.
NOT_RUN = [
    ("docs/integrations.md", "needs a Django project with an Order model; docs/django.md runs in one"),
    ("docs/operations.md", "needs a PgBouncer at pgbouncer:6432; tests/pgbouncer runs these settings"),
    ("docs/django.md", "needs pytest-django, which tests/djangotasks replaces with its own database fixture"),
]

# Pages whose blocks start the worker they wait for, as a reader must: the test runs none for them
# (on the others, a worker per App stands in for the reader's `pgq worker` in another terminal).
OWN_WORKERS = {"docs/tracing.md", "docs/fairness.md"}

# Pages whose ```sql blocks run as well (see the module docstring).
SQL_PAGES = {"docs/fairness.md"}


@dataclass(frozen=True)
class Block:
    """One ```python (or ```sql) block: its page (relative to the repository), first line of code,
    code, the reason given by a `<!-- not-run: ... -->` marker right before it (None: it runs), and
    its language."""

    page: str
    line: int
    code: str
    not_run: str | None
    lang: str = "python"


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """The python blocks of a markdown page, and its sql blocks if it is one of SQL_PAGES, in page
    order (`page` relative to `root`)."""
    text = path.read_text()
    page = str(path.relative_to(root))
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) == "sql" and page not in SQL_PAGES:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        line = text.count("\n", 0, match.start()) + 2
        found.append(Block(page, line, match.group(2), marker.group(1) if marker else None, match.group(1)))
    return found


def as_url(dsn: str) -> str:
    """`dsn` as a postgresql:// URL (the pages' examples, SQLAlchemy's among them, take URLs)."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    params = conninfo_to_dict(dsn)
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    dbname = quote(str(params.pop("dbname", "")), safe="")
    credentials = f"{user}:{quote(str(password), safe='')}" if password is not None else user
    return f"postgresql://{credentials}@/{dbname}?{urlencode({k: str(v) for k, v in params.items()})}"


def reader_code(dsn: str) -> dict[str, dict[str, Any]]:
    """Per page, the names the page says the reader provides (their own code and settings); a name
    with a dot is a module of the reader's (`myapp.exports`), given as a dict of its names."""

    def create_order(conn: psycopg.Connection[Any]) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (42) ON CONFLICT DO NOTHING")

    async def provider_done(export_id: str) -> bool:
        return True

    return {
        "docs/guide.md": {"dsn": dsn, "create_order": create_order, "write_chunk": lambda start: None,
                          "myapp.exports": {"provider_done": provider_done}},
        "docs/workflows.md": {
            "DSN": dsn, "make_thumbnail": lambda image_id: f"/thumbs/{image_id}.png", "invoices": [1, 2, 3],
            "provider": types.SimpleNamespace(status=lambda export_id: types.SimpleNamespace(state="done", url="u")),
            "customer_api": types.SimpleNamespace(push=lambda account, url: None),
            "deliveries": types.SimpleNamespace(is_stamped=lambda export_id: False, stamp=lambda export_id: None),
        },
        "docs/integrations.md": {"dsn": as_url(dsn)},
        "docs/tracing.md": {"dsn": dsn},
        "docs/fairness.md": {"DSN": dsn},
        "docs/operations.md": {"dsn": dsn},
    }


class PageWorkers:
    """A real worker (in a thread) for each pgq.App a page creates, serving every queue, restarted
    when the app gains a task, so the page's blocks can wait for results."""

    def __init__(self) -> None:
        self.running: dict[int, tuple[pgq.App, frozenset[str], pgq.Worker, threading.Thread]] = {}

    def follow(self, namespaces: list[dict[str, Any]]) -> None:
        """Start or restart the workers of the apps now in `namespaces`."""
        for ns in namespaces:
            for app in [v for v in ns.values() if isinstance(v, pgq.App)]:
                kinds = frozenset(app.tasks)
                current = self.running.get(id(app))
                if current is not None and current[1] == kinds:
                    continue
                if current is not None:
                    self._stop(current[2], current[3])
                worker = pgq.Worker(app, concurrency=4, lease=5, poll_interval=0.2)
                thread = threading.Thread(target=worker.run, daemon=True)  # signals: main thread only
                thread.start()
                self.running[id(app)] = (app, kinds, worker, thread)

    def kinds(self) -> set[str]:
        """Every task name of the apps followed."""
        return {kind for app, _, _, _ in self.running.values() for kind in app.tasks}

    @staticmethod
    def _stop(worker: pgq.Worker, thread: threading.Thread) -> None:
        worker.stop()
        thread.join(20)
        assert not thread.is_alive(), "a page's worker did not stop"

    def stop(self) -> None:
        """Stop every worker and close the apps."""
        for app, _, worker, thread in self.running.values():
            self._stop(worker, thread)
            app.close()


def settle(dsn: str, kinds: set[str], timeout: float = 20.0) -> list[dict[str, Any]]:
    """Wait until no job of `kinds` is due or running, or one of them hit an error; return the jobs
    of `kinds` that failed or recorded an error."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        while True:
            busy = conn.execute("SELECT count(*) AS n FROM pgq.jobs WHERE kind = ANY(%s) AND "
                                "status IN ('queued', 'running') AND run_at <= now()", [list(kinds)]).fetchone()
            # A job of a task a block just declared can be claimed by the app's worker before it is
            # restarted knowing that task: handed back with "no worker ... knows kind ...", it runs once
            # the restarted worker claims it (and if none does, it stays due until the timeout).
            bad = conn.execute("SELECT id, kind, queue, payload, status::text, last_error FROM pgq.jobs "
                               "WHERE kind = ANY(%s) AND (status = 'failed' OR (last_error IS NOT NULL AND "
                               "last_error NOT LIKE 'no worker of queue %% knows kind %%'))",
                               [list(kinds)]).fetchall()
            if bad or (busy is not None and busy["n"] == 0):
                return bad
            assert time.monotonic() < deadline, f"jobs of {sorted(kinds)} still due after {timeout} s"
            time.sleep(0.05)


def install_module(name: str, names: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Make `name` importable (its packages created empty, unless already there), holding `names`;
    undone at the end of the test."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in sys.modules:
            pkg = types.ModuleType(package)
            pkg.__path__ = []
            monkeypatch.setitem(sys.modules, package, pkg)
    module = types.ModuleType(name)
    module.__dict__.update(names)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def run_as_module(name: str, code: str, filename: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run `code` as module `name`, importable afterwards; return its namespace."""
    module = install_module(name, {}, monkeypatch)
    exec(compile(code, filename, "exec"), module.__dict__)
    return module.__dict__


def call_tests(ns: dict[str, Any], request: pytest.FixtureRequest, done: set[str]) -> None:
    """Call each new `test_*` function of `ns` with the fixtures its parameters name."""
    for name, func in list(ns.items()):
        if name.startswith("test_") and callable(func) and name not in done:
            done.add(name)
            func(**{p: request.getfixturevalue(p) for p in inspect.signature(func).parameters})


PAGE_BLOCKS = {str(page.relative_to(ROOT)): blocks_of(page) for page in PAGES}


def test_every_python_block_runs_or_is_marked_not_run() -> None:
    marked = [(b.page, b.not_run) for blocks in PAGE_BLOCKS.values() for b in blocks if b.not_run is not None]
    assert sorted(marked) == sorted(NOT_RUN)
    assert all(reason for _, reason in marked), "a not-run marker must give its reason"
    assert sum(len(b) for b in PAGE_BLOCKS.values()) >= 20  # the pattern still finds the blocks


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, pgq_dsn: str) -> Iterator[None]:
    """PGQ_DSN (README, dashboard) names the test database; PGQ_DASHBOARD_PASSWORD is set."""
    monkeypatch.setenv("PGQ_DSN", pgq_dsn)
    monkeypatch.setenv("PGQ_DASHBOARD_PASSWORD", "s3cret")
    yield


@pytest.mark.parametrize("page", [p for p, blocks in PAGE_BLOCKS.items() if any(not b.not_run for b in blocks)])
@pytest.mark.usefixtures("clean_env")
def test_page_code_blocks_run(page: str, pgq_dsn: str, request: pytest.FixtureRequest,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    if page == "docs/django.md":  # its blocks run in the Django project of tests/djangotasks
        request.getfixturevalue("django_dsn")
    seed = reader_code(pgq_dsn).get(page, {})
    for name, names in seed.items():
        if "." in name:
            install_module(name, names, monkeypatch)
    # A module of its own (in sys.modules), as a reader's script is: dataclasses look their class's
    # module up there.
    ns: dict[str, Any] = install_module("__docs__", {k: v for k, v in seed.items() if "." not in k},
                                        monkeypatch).__dict__
    namespaces = [ns]
    workers = PageWorkers()
    tests_run: set[str] = set()
    try:
        for block in PAGE_BLOCKS[page]:
            if block.not_run:
                continue
            where = f"{block.page}:{block.line}"
            first = block.code.split("\n", 1)[0]
            module = MODULE_LINE.fullmatch(first.strip())
            try:
                if block.lang == "sql":
                    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                        conn.execute(block.code.encode())  # bytes: the page's text, as psql sends it
                elif module:
                    module_ns = run_as_module(module.group(1).replace("/", "."), block.code, where, monkeypatch)
                    ns.update({k: v for k, v in module_ns.items() if not k.startswith("__")})
                    namespaces.append(module_ns)
                else:
                    exec(compile(block.code, where, "exec"), ns)
                call_tests(ns, request, tests_run)
            except Exception as exc:
                raise AssertionError(f"the {block.lang} block at {where} fails: {exc!r}") from exc
            if page not in OWN_WORKERS:
                workers.follow(namespaces)
        kinds = workers.kinds()
        if kinds:
            bad = settle(pgq_dsn, kinds)
            assert not bad, f"jobs of {page}'s own tasks failed: {bad}"
    finally:
        workers.stop()
        for value in list(ns.values()):
            if isinstance(value, pgq.Queue):
                value.close()


def test_not_run_marker_applies_to_the_next_block_only(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("a\n\n<!-- not-run: forever -->\n```python\nwhile True: pass\n```\n\n```python\nx = 1\n```\n")
    found = blocks_of(page, root=tmp_path)
    assert [(b.not_run, b.code) for b in found] == [("forever", "while True: pass\n"), (None, "x = 1\n")]


def test_the_sql_blocks_of_the_sql_pages_are_found() -> None:
    for page in SQL_PAGES:
        assert any(b.lang == "sql" for b in PAGE_BLOCKS[page]), page
    assert all(b.lang == "python" for page, blocks in PAGE_BLOCKS.items() if page not in SQL_PAGES for b in blocks)
