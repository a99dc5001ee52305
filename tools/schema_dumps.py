"""Dump pgq's schema (pg_dump --schema-only --schema=pgq) after every upgrade and downgrade step.

    python tools/schema_dumps.py OUTDIR [ADMIN_DSN]

Creates a scratch database on the server of ADMIN_DSN (default: postgres on 127.0.0.1:5432),
migrates it up to head with the pgq this checkout holds, then down one revision at a time to base,
then up again one at a time, writing OUTDIR/<step>.sql after each step (pg_dump's \\restrict lines,
which carry a random key, left out), and drops the database. Run it before and after a change that
must not change the schema (converting a revision: sql/README.md) and compare: `diff -r OLD NEW`.
Needs pg_dump on PATH.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pgq import migrate  # noqa: E402  (the checkout's pgq, not an installed one)


def dump(dsn: str, path: Path) -> None:
    """Write the schema pgq of the database at `dsn` to `path`."""
    out = subprocess.run(["pg_dump", "--schema-only", "--schema=pgq", "--dbname", dsn],
                         check=True, capture_output=True, text=True).stdout
    path.write_text("".join(line for line in out.splitlines(keepends=True)
                            if not line.startswith(("\\restrict", "\\unrestrict"))))


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    admin = argv[1] if len(argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"pgq_dumps_{uuid.uuid4().hex[:8]}"
    dsn = make_conninfo(**{**conninfo_to_dict(admin), "dbname": name})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        # The revisions in order, from the files (numbers may leave gaps while branches are merged).
        revisions = sorted(p.name[:4] for p in (ROOT / "alembic" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
        head = len(revisions)
        migrate.upgrade(dsn)
        dump(dsn, out / "head.sql")
        for revision in [*reversed(revisions[:-1]), "base"]:
            migrate.downgrade(dsn, revision)
            dump(dsn, out / f"down_{revision}.sql")
        for revision in revisions:
            migrate.upgrade(dsn, revision)
            dump(dsn, out / f"up_{revision}.sql")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"wrote {2 * head + 1} dumps to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
