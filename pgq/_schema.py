"""Assemble a migration file of `sql/schema/` from its DDL and the function files it names.

A migration file keeps its DDL and says where a function definition goes with a directive line
(see sql/README.md):

    -- pgq:function claim            the definition of pgq.claim as this revision installs it
    -- pgq:function claim@previous   (in a down file) the definition of the latest earlier revision
                                     whose up file installs pgq.claim

Each definition is stored once. The current one (as a freshly migrated database has it) is
`sql/functions/<name>.sql`; one that a later revision superseded stays with the revision that
installed it, in `sql/schema/<revision>/functions/<name>.sql`. Which revisions install a function is
read from the directives of the up files themselves, so nothing else has to be kept in step.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Final

from ._sql import data_dir

__all__ = ["DIRECTIVE", "expand", "function_path", "previous_revision", "revisions_defining", "schema_file"]

DIRECTIVE: Final = re.compile(
    r"^-- pgq:function (?P<name>[a-z_][a-z0-9_]*)(?P<previous>@previous)?[ \t]*$", re.MULTILINE
)
"""A directive line: `-- pgq:function NAME` or `-- pgq:function NAME@previous`, alone on its line."""

_REVISION_FILE: Final = re.compile(r"^(?P<revision>\d{4})_\w+\.(?P<direction>up|down)\.sql$")


def _sql_dir() -> Path:
    return data_dir("sql")


@functools.cache
def _definers(sql_dir: Path) -> dict[str, tuple[str, ...]]:
    """Map each function file name to the revisions whose up file includes it, oldest first."""
    found: dict[str, list[str]] = {}
    for path in sorted((sql_dir / "schema").glob("*.up.sql")):
        match = _REVISION_FILE.match(path.name)
        if match is None:
            continue
        for directive in DIRECTIVE.finditer(path.read_text(encoding="utf-8")):
            if directive.group("previous"):
                raise ValueError(f"{path.name}: an up file names a definition, not {directive.group(0)!r}")
            revisions = found.setdefault(directive.group("name"), [])
            if match.group("revision") in revisions:
                raise ValueError(f"{path.name} includes function {directive.group('name')!r} twice")
            revisions.append(match.group("revision"))
    return {name: tuple(revisions) for name, revisions in found.items()}


def revisions_defining(name: str, sql_dir: Path | None = None) -> tuple[str, ...]:
    """Return the revisions whose up file includes function file `name`, oldest first (() if none)."""
    return _definers(sql_dir or _sql_dir()).get(name, ())


def function_path(name: str, revision: str, sql_dir: Path | None = None) -> Path:
    """Return the file that holds function `name` as `revision` defines it.

    `sql/functions/<name>.sql` when `revision` is the last one to define it, else
    `sql/schema/<revision>/functions/<name>.sql`. Raises LookupError when `revision` does not define it.
    """
    root = sql_dir or _sql_dir()
    revisions = revisions_defining(name, root)
    if revision not in revisions:
        raise LookupError(f"revision {revision} does not define function {name!r} (defined by: {list(revisions)})")
    if revision == revisions[-1]:
        return root / "functions" / f"{name}.sql"
    return root / "schema" / revision / "functions" / f"{name}.sql"


def previous_revision(name: str, revision: str, sql_dir: Path | None = None) -> str:
    """Return the latest revision before `revision` that defines function `name`; LookupError if none."""
    earlier = [r for r in revisions_defining(name, sql_dir) if r < revision]
    if not earlier:
        raise LookupError(f"no revision before {revision} defines function {name!r}: use DROP FUNCTION instead")
    return earlier[-1]


def expand(file_name: str, text: str, sql_dir: Path | None = None) -> str:
    """Return `text`, the migration `sql/schema/<file_name>`, with each directive replaced by its file.

    Lines other than directives are kept as they are. Raises ValueError for a file name that is not
    a revision's up or down file while it has directives, LookupError for a directive that names no
    definition, and FileNotFoundError when the definition's file is missing.
    """
    if DIRECTIVE.search(text) is None:
        return text
    match = _REVISION_FILE.match(file_name)
    if match is None:
        raise ValueError(f"{file_name}: only NNNN_name.up.sql / .down.sql files may include functions")
    revision, direction = match.group("revision"), match.group("direction")

    def replace(directive: re.Match[str]) -> str:
        name = directive.group("name")
        if directive.group("previous"):
            if direction == "up":
                raise ValueError(f"{file_name}: {directive.group(0)!r} belongs in a down file")
            source = previous_revision(name, revision, sql_dir)
        else:
            if direction == "down":
                raise ValueError(f"{file_name}: a down file restores with {name}@previous, not {name}")
            source = revision
        return function_path(name, source, sql_dir).read_text(encoding="utf-8").rstrip("\n")

    return DIRECTIVE.sub(replace, text)


def schema_file(name: str) -> str:
    """Return the DDL text of `sql/schema/<name>` (used by the alembic revisions), each directive
    replaced by the function definition it names (see `expand` for its errors)."""
    return expand(name, (_sql_dir() / "schema" / name).read_text(encoding="utf-8"))


HASHES: Final = "schema/function-hashes.txt"
"""sql/schema/function-hashes.txt: `<sha256> <revision> <name>` for each definition a revision includes.

A released revision's definition must never change (databases migrated past it would not get the
change): tests/migrations compares each file with its line, and a new revision adds its lines."""


def definition_hash(path: Path) -> str:
    """Return the sha256 of a definition file's text, as function-hashes.txt records it."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def all_definitions(sql_dir: Path | None = None) -> list[tuple[str, str]]:
    """Return every (revision, name) whose up file includes function `name`, in revision order."""
    pairs = [(r, name) for name, revisions in _definers(sql_dir or _sql_dir()).items() for r in revisions]
    return sorted(pairs)
