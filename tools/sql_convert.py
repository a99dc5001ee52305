"""Convert an old-style revision (function bodies written out in its up and down files) to includes.

    python3 dev.py sql-convert NNNN [--check]

For revision NNNN (sql/schema/NNNN_*.up.sql and .down.sql), see sql/README.md:
1. up file: each `CREATE [OR REPLACE] FUNCTION pgq.NAME` statement, and the `COMMENT ON FUNCTION
   pgq.NAME` statements after it, become the line `-- pgq:function NAME`. The statement (`CREATE OR
   REPLACE` from now on) and its comment are written to sql/functions/NAME.sql; the file that was
   there (the definition of an earlier revision L) first moves to sql/schema/L/functions/NAME.sql
   (`git mv`, so that its history follows it). A definition without a COMMENT keeps the comment of
   the one it replaces: `CREATE OR REPLACE` keeps the database's comment too. Each new file gets
   its line in sql/schema/function-hashes.txt.
2. down file: each `CREATE [OR REPLACE] FUNCTION pgq.NAME` statement equal to the definition of the
   latest earlier revision that defines NAME (compared as written, but for `OR REPLACE` and
   surrounding white space), with its `COMMENT ON FUNCTION` statements, becomes
   `-- pgq:function NAME@previous`. One that differs is left as it is and reported: look at it.
Comment lines just above a converted statement stay in the migration, above the directive.

With --check nothing is written: it prints what it would do. Run the migration tests afterwards.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pgq import _schema  # noqa: E402  (the checkout's pgq, not an installed one)

SQL = ROOT / "sql"
CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pgq\.(\w+)\s*\(", re.IGNORECASE)
COMMENT = re.compile(r"COMMENT\s+ON\s+FUNCTION\s+pgq\.(\w+)\s*\(", re.IGNORECASE)
DROP = re.compile(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?pgq\.(\w+)\b", re.IGNORECASE)
DOLLAR = re.compile(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$")


@dataclass
class Statement:
    """One statement of a SQL file: text[start:end] is the statement up to and including its ';'."""

    start: int
    end: int
    text: str


def statements(text: str) -> list[Statement]:
    """Split `text` into its statements, skipping comments, strings, quoted names and $$ bodies."""
    found: list[Statement] = []
    i, start, n = 0, None, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i + 1
            continue
        if text.startswith("/*", i):
            i = text.index("*/", i) + 2
            continue
        if c.isspace():
            i += 1
            continue
        if start is None:
            start = i
        if c in "'\"":
            i += 1
            while True:
                i = text.index(c, i) + 1
                if text.startswith(c, i):  # '' or "" inside
                    i += 1
                    continue
                break
            continue
        if c == "$":
            tag = DOLLAR.match(text, i)
            if tag:
                i = text.index(tag.group(0), tag.end()) + len(tag.group(0))
                continue
        if c == ";":
            found.append(Statement(start, i + 1, text[start : i + 1]))
            start = None
        i += 1
    if start is not None and text[start:].strip():
        raise ValueError(f"unterminated statement at offset {start}")
    return found


def normalized(statement: str) -> str:
    """A function statement as compared between files: `CREATE OR REPLACE`, outer white space trimmed."""
    return CREATE.sub(lambda m: f"CREATE OR REPLACE FUNCTION pgq.{m.group(1)}(", statement.strip(), count=1)


def definition_parts(text: str) -> tuple[str, list[str]]:
    """Split a function file into its CREATE statement and its COMMENT statements."""
    parts = statements(text)
    return parts[0].text, [p.text for p in parts[1:] if COMMENT.match(p.text)]


def revision_files(revision: str) -> tuple[Path, Path]:
    (up,) = (SQL / "schema").glob(f"{revision}_*.up.sql")
    return up, up.with_name(up.name.replace(".up.sql", ".down.sql"))


def rewrite(text: str, replacements: list[tuple[int, int, str]]) -> str:
    """Replace each (start, end) span of `text` with its string; an empty string removes the span's
    line(s) entirely."""
    out, last = [], 0
    for start, end, new in sorted(replacements):
        if new == "":
            # Drop the whole lines the span stands on, and the line break after it.
            start = text.rfind("\n", 0, start) + 1
            if text.startswith("\n", end):
                end += 1
        out.append(text[last:start])
        out.append(new)
        last = end
    out.append(text[last:])
    return "".join(out)


def add_hash(line: str) -> None:
    """Add `line` to sql/schema/function-hashes.txt, kept in (revision, name) order."""
    path = SQL / _schema.HASHES
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    lines.append(line)
    path.write_text("\n".join(sorted(lines, key=lambda x: x.split()[1:])) + "\n", encoding="utf-8")


def convert_up(revision: str, up: Path, check: bool) -> list[str]:
    """Convert the up file; return the names it now includes."""
    text = up.read_text(encoding="utf-8")
    parts = statements(text)
    replacements: list[tuple[int, int, str]] = []
    names: list[str] = []
    new_files: dict[str, str] = {}
    for index, part in enumerate(parts):
        create = CREATE.match(part.text)
        if not create:
            continue
        name = create.group(1)
        if name in names:
            raise SystemExit(f"{up.name}: defines pgq.{name} twice; fold it into one definition by hand first")
        names.append(name)
        comments = [p for p in parts[index + 1 :] if (m := COMMENT.match(p.text)) and m.group(1) == name]
        dropped = any((m := DROP.match(p.text)) and m.group(1) == name for p in parts[:index])
        comment_texts = [c.text for c in comments]
        if not comment_texts and not dropped and _schema.revisions_defining(name, SQL):
            earlier = _schema.function_path(name, _schema.revisions_defining(name, SQL)[-1], SQL)
            comment_texts = definition_parts(earlier.read_text(encoding="utf-8"))[1]
        new_files[name] = "\n\n".join([normalized(part.text), *comment_texts]) + "\n"
        replacements.append((part.start, part.end, f"-- pgq:function {name}"))
        replacements += [(c.start, c.end, "") for c in comments]
    for name in names:
        earlier_revisions = _schema.revisions_defining(name, SQL)
        if earlier_revisions and earlier_revisions[-1] >= revision:
            raise SystemExit(f"{up.name}: revision {earlier_revisions[-1]} already defines {name}; convert in order")
        current = SQL / "functions" / f"{name}.sql"
        print(f"{revision} up: pgq.{name} -> sql/functions/{name}.sql"
              + (f" (was {earlier_revisions[-1]}'s, moved to its history)" if earlier_revisions else ""))
        if check:
            continue
        if earlier_revisions:
            history = SQL / "schema" / earlier_revisions[-1] / "functions" / f"{name}.sql"
            history.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", str(current), str(history)], cwd=ROOT, check=True)
        current.parent.mkdir(parents=True, exist_ok=True)
        current.write_text(new_files[name], encoding="utf-8")
        subprocess.run(["git", "add", str(current)], cwd=ROOT, check=True)
        add_hash(f"{_schema.definition_hash(current)} {revision} {name}")
    if not check and replacements:
        up.write_text(rewrite(text, replacements), encoding="utf-8")
    return names


def convert_down(revision: str, down: Path, check: bool) -> None:
    """Replace the down file's restorations of earlier definitions with `@previous` directives."""
    text = down.read_text(encoding="utf-8")
    parts = statements(text)
    replacements: list[tuple[int, int, str]] = []
    for index, part in enumerate(parts):
        create = CREATE.match(part.text)
        if not create:
            continue
        name = create.group(1)
        try:
            source = _schema.previous_revision(name, revision, SQL)
        except LookupError:
            print(f"{revision} down: pgq.{name} left written out (no earlier revision's up file defines it)")
            continue
        path = _schema.function_path(name, source, SQL)
        stored, stored_comments = definition_parts(path.read_text(encoding="utf-8"))
        if normalized(part.text) != normalized(stored):
            print(f"{revision} down: pgq.{name} left written out: it differs from {path.relative_to(ROOT)}")
            continue
        comments = [p for p in parts[index + 1 :] if (m := COMMENT.match(p.text)) and m.group(1) == name]
        if [c.text for c in comments] not in ([], stored_comments):
            print(f"{revision} down: pgq.{name}'s COMMENT differs from {path.relative_to(ROOT)}; kept after it")
            comments = []
        print(f"{revision} down: pgq.{name} -> {name}@previous ({path.relative_to(ROOT)})")
        replacements.append((part.start, part.end, f"-- pgq:function {name}@previous"))
        replacements += [(c.start, c.end, "") for c in comments]
    if not check and replacements:
        down.write_text(rewrite(text, replacements), encoding="utf-8")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    revisions = [a for a in argv if a != "--check"]
    if not revisions or not all(re.fullmatch(r"\d{4}", r) for r in revisions):
        print(__doc__)
        return 2
    for revision in revisions:
        up, down = revision_files(revision)
        _schema._definers.cache_clear()
        convert_up(revision, up, check)
        _schema._definers.cache_clear()
        convert_down(revision, down, check)
    _schema._definers.cache_clear()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
