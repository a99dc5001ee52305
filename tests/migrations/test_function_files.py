"""sql/functions/ holds what a migrated database has; migrations include each definition, stored once.

See sql/README.md for the layout these tests hold the files to.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import psycopg
import pytest

from pgq import _schema, migrate
from pgq._schema import schema_file
from pgq._sql import data_dir
from tests.migrations.test_migrations import schema_snapshot

SQL = data_dir("sql")
FUNCTIONS = SQL / "functions"
CREATE = re.compile(r"^CREATE OR REPLACE FUNCTION pgq\.(\w+)\(", re.MULTILINE)
REVISIONS = sorted(p.name for p in (SQL / "schema").glob("[0-9][0-9][0-9][0-9]_*.sql"))

# What pg_get_functiondef and the comment say of each pgq function, by name (pgq has no overloads).
CATALOG = """
    SELECT p.proname, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')
    FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace ORDER BY 1
"""


def catalog(conn: psycopg.Connection) -> dict[str, tuple[str, str | None]]:
    return {name: (definition, comment) for name, definition, comment in conn.execute(CATALOG)}


def drift(name: str, before: tuple[str, str | None], after: tuple[str, str | None] | None) -> str:
    """Say how running sql/functions/<name>.sql changed pgq.<name> (its definition or comment)."""
    if after is None:
        return f"pgq.{name}: sql/functions/{name}.sql dropped it"
    lines = difflib.unified_diff(
        f"{before[0]}\nCOMMENT: {before[1]}".splitlines(), f"{after[0]}\nCOMMENT: {after[1]}".splitlines(),
        "migrated database", f"sql/functions/{name}.sql", lineterm="", n=1,
    )
    return f"pgq.{name} drifted: sql/functions/{name}.sql differs from the migrated database:\n" + "\n".join(lines)


def test_each_function_file_holds_what_a_freshly_migrated_database_has(pgq_dsn: str) -> None:
    # Running a current file on a migrated database must change nothing: same definition (as
    # pg_get_functiondef prints it), same comment, no other function.
    problems: list[str] = []
    with psycopg.connect(pgq_dsn) as conn:
        migrated = catalog(conn)
        missing = sorted(set(migrated) - {p.stem for p in FUNCTIONS.glob("*.sql")})
        problems += [f"pgq.{name} has no file sql/functions/{name}.sql" for name in missing]
        for path in sorted(FUNCTIONS.glob("*.sql")):
            text = path.read_text(encoding="utf-8")
            if CREATE.findall(text) != [path.stem]:
                problems.append(f"{path.name} must define pgq.{path.stem} (CREATE OR REPLACE), and only it")
                continue
            if path.stem not in migrated:
                problems.append(f"{path.name}: a migrated database has no function pgq.{path.stem}")
                continue
            conn.execute("SAVEPOINT drift")
            conn.execute(text)  # pgq's own file
            after = catalog(conn)
            conn.execute("ROLLBACK TO SAVEPOINT drift")
            if after != migrated:
                changed = {name for name in set(migrated) | set(after) if migrated.get(name) != after.get(name)}
                for name in sorted(changed):
                    if name not in migrated:
                        problems.append(f"{path.name} created pgq.{name}, which a migrated database lacks")
                    else:
                        problems.append(drift(name, migrated[name], after.get(name)))
    assert not problems, "\n\n".join(problems)


def test_every_directive_names_a_stored_definition_and_every_stored_one_is_used() -> None:
    used: set[Path] = set()
    for name in REVISIONS:
        schema_file(name)  # raises for a directive without its definition
        revision = name[:4]
        for directive in _schema.DIRECTIVE.finditer((SQL / "schema" / name).read_text(encoding="utf-8")):
            function = directive.group("name")
            source = _schema.previous_revision(function, revision) if directive.group("previous") else revision
            used.add(_schema.function_path(function, source))
    history = set((SQL / "schema").glob("*/functions/*.sql"))
    assert sorted(map(str, history - used)) == [], "definitions no migration includes"
    # A current file no migration includes: only the functions born of a RENAME (see sql/README.md).
    unused = sorted(p.stem for p in set(FUNCTIONS.glob("*.sql")) - used)
    assert unused == []


def test_a_definition_is_stored_once() -> None:
    # No function file repeats another's statement: each revision's definition differs from the one
    # it supersedes (a revision that re-installs a definition unchanged includes it, it does not copy).
    seen: dict[str, Path] = {}
    for path in sorted([*FUNCTIONS.glob("*.sql"), *(SQL / "schema").glob("*/functions/*.sql")]):
        text = path.read_text(encoding="utf-8").strip()
        assert text not in seen, f"{path} repeats {seen[text]}"
        seen[text] = path


_CHAIN = sorted({p.name[:4] for p in (SQL / "schema").glob("[0-9][0-9][0-9][0-9]_*.up.sql")})
"""The revisions in order (numbers may skip: a branch's revision is renumbered when it lands)."""


@pytest.mark.parametrize("revision", _CHAIN[1:])
def test_each_downgrade_restores_the_schema_of_the_revision_below(pgq_empty_dsn: str, revision: str) -> None:
    below = _CHAIN[_CHAIN.index(revision) - 1]
    migrate.upgrade(pgq_empty_dsn, below)
    expected = schema_snapshot(pgq_empty_dsn)
    migrate.upgrade(pgq_empty_dsn, revision)
    migrate.downgrade(pgq_empty_dsn, below)
    restored = schema_snapshot(pgq_empty_dsn)
    if revision == "0007":  # Postgres cannot drop an enum value: job_status keeps 'waiting' (unused)
        restored["types"] = [(*row[:3], [v for v in row[3] if v != "waiting"]) for row in restored["types"]]
    assert restored == expected


def test_no_released_definition_changes_in_place() -> None:
    # Migrations include the definition files, so editing one would change what an old revision
    # installs on a new database and nothing on a migrated one. A change is a new revision.
    recorded = {}
    for line in (SQL / _schema.HASHES).read_text(encoding="utf-8").splitlines():
        digest, revision, name = line.split()
        recorded[revision, name] = digest
    actual = {(r, n): _schema.definition_hash(_schema.function_path(n, r)) for r, n in _schema.all_definitions()}
    problems = [
        f"{_schema.function_path(n, r).relative_to(SQL.parent)} (pgq.{n} as revision {r} defines it) changed: "
        "write the change as a new revision (sql/README.md)"
        for (r, n), digest in sorted(actual.items()) if recorded.get((r, n), digest) != digest
    ]
    problems += [f"{_schema.HASHES} lacks revision {r}'s pgq.{n}: add its line"
                 for r, n in sorted(actual.keys() - recorded.keys())]
    problems += [f"{_schema.HASHES} names revision {r}'s pgq.{n}, which no up file includes"
                 for r, n in sorted(recorded.keys() - actual.keys())]
    assert not problems, "\n".join(problems)
