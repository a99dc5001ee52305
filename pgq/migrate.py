"""Migrate a database to pgq's schema: alembic, driven from code.

pgq ships its alembic environment as package data (`alembic/` in a checkout, `pgq/_data/alembic` in a
wheel) and builds the alembic `Config` here, so users never need an `alembic.ini`. Every revision
executes a DDL file from `sql/schema/`, with the function definitions of `sql/functions/` (and the
superseded ones kept in `sql/schema/NNNN/functions/`) it includes (pgq._schema, sql/README.md).

pgq keeps its own version table, `pgq.alembic_version`, so its history never collides with the
alembic history of the application that shares the database. Migrations take the advisory lock
`MIGRATION_LOCK_KEY` inside their one transaction: services that migrate at start-up may race freely;
the later ones wait, then find nothing left to do.

Progress is logged to the logger "pgq.migrate"; alembic itself prints nothing.
"""

from __future__ import annotations

import functools
import io
import logging
import re
import threading
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ._schema import schema_file
from ._sql import data_dir
from .errors import NotMigrated, PgqError

if TYPE_CHECKING:
    from alembic.config import Config

# alembic (and SQLAlchemy under it) is imported only by the functions that migrate: a worker or a
# CLI command that merely checks the schema is current starts half a second sooner without it.

__all__ = [
    "MIGRATION_LOCK_KEY",
    "current_revision",
    "downgrade",
    "ensure_migrated",
    "execute_schema_file",
    "head_revision",
    "upgrade",
    "upgrade_sql",
]

logger = logging.getLogger("pgq.migrate")

MIGRATION_LOCK_KEY: Final = 0x7067_713A_6D69_6772
"""Key of the transaction-level advisory lock every pgq migration holds (the bytes of "pgq:migr").

Tools that must not run while pgq's schema changes can take it too: `pg_advisory_xact_lock(key)`.
"""

VERSION_SCHEMA: Final = "pgq"
VERSION_TABLE: Final = "alembic_version"

# alembic's `context` and `op` are module-level proxies shared by every thread of the process, so two
# alembic commands must never run at once in one process. Other processes are serialized by the
# advisory lock instead.
_alembic_lock = threading.Lock()


def _config(dsn: str | None, output_buffer: io.StringIO | None = None) -> Config:
    """Build the alembic Config of pgq's environment. The DSN travels in `config.attributes`."""
    from alembic.config import Config

    # Whatever alembic would print goes nowhere; pgq reports through logging.
    config = Config(output_buffer=output_buffer, stdout=io.StringIO())
    # The ini parser interpolates '%': a path containing one must double it.
    config.set_main_option("script_location", str(data_dir("alembic")).replace("%", "%%"))
    config.attributes["dsn"] = dsn
    return config


def _database_name(dsn: str) -> str:
    """Describe the database of `dsn` for log lines, never showing its password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "database (unparsable DSN)"
    return f"database {params.get('dbname') or '(default)'!s}"


def _log_revision(dsn: str) -> None:
    """Log the revision the database ended at (costs a connection, so only when INFO is enabled)."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s is at revision %s", _database_name(dsn), current_revision(dsn) or "base")


def _read_revisions(conn: psycopg.Connection[Any]) -> list[str]:
    """Return the revisions recorded in pgq.alembic_version ([] when the table does not exist)."""
    row = conn.execute("SELECT to_regclass('pgq.alembic_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return []
    return [r[0] for r in conn.execute("SELECT version_num FROM pgq.alembic_version ORDER BY 1")]


_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=]*=\s*(?:None|['\"]([^'\"]+)['\"])", re.MULTILINE)


@functools.cache
def head_revision() -> str:
    """Return the newest revision this installation of pgq ships (e.g. ``"0001"``).

    Reads the `revision` and `down_revision` lines of the revision files once per process, without
    importing alembic (tests check the answer equals alembic's own); touches no database. Raises
    FileNotFoundError when the installation lacks its alembic directory, RuntimeError when the files
    do not form one line of history.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (data_dir("alembic") / "versions").glob("*.py"):
        fields = {m.group(1): m.group(2) for m in _REVISION_LINE.finditer(path.read_text(encoding="utf-8"))}
        if fields.get("revision"):
            revisions.add(fields["revision"])
            if fields.get("down_revision"):
                parents.add(fields["down_revision"])
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"pgq's alembic revisions must have exactly one head, found {sorted(heads) or 'none'}")
    return heads.pop()


MIN_SERVER_VERSION: Final = 140000
"""The oldest PostgreSQL pgq supports (14); CI runs the suite on 14, 15, 16, 17 and 18."""


def check_server_version(version_num: int) -> None:
    """Raise PgqError naming the server's version when it is older than PostgreSQL 14
    (`version_num` as `server_version_num` gives it, e.g. 150019)."""
    if version_num < MIN_SERVER_VERSION:
        major, minor = divmod(version_num, 10000)
        raise PgqError(f"pgq needs PostgreSQL 14 or newer; this server is {major}.{minor}")


def current_revision(dsn: str) -> str | None:
    """Return the pgq revision the database at `dsn` is at, or None when pgq was never migrated there.

    Opens and closes its own connection; reads `pgq.alembic_version` and changes nothing. Raises
    psycopg.OperationalError when the database cannot be reached.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        revisions = _read_revisions(conn)
    return revisions[0] if revisions else None


def upgrade(dsn: str, revision: str = "head", *, roles_prefix: str | None = None) -> None:
    """Migrate the database at `dsn` up to `revision` (default: the newest one).

    When pgq's roles exist in this database (see pgq.roles.sync_grants for how they are found;
    `roles_prefix` names them), the same transaction then re-runs the roles script, and that of
    every scoped role set (pgq.role_sets.sync_scoped), so that they own and are granted exactly what
    it gives them, new objects included: no `pgq roles` is needed after an upgrade. The account
    migrating must then be a superuser or a member of the admin role. Without the roles nothing of
    them changes; roles that exist for other databases only are never granted.

    Runs every pending revision in one transaction that holds the advisory lock MIGRATION_LOCK_KEY, so
    concurrent callers (other threads, processes or hosts) serialize; a caller that finds the database
    already at `revision` changes nothing. Creates the schema `pgq` if needed and records the revision
    in `pgq.alembic_version`. Opens and closes its own connection. Raises PgqError on a server older
    than PostgreSQL 14 (nothing changed), psycopg errors when the
    database cannot be reached or the DDL fails (the transaction is then rolled back: nothing changed),
    and alembic.util.CommandError for an unknown revision; PgqError when the roles of a given
    `roles_prefix` do not all exist (nothing changed).
    """
    import alembic.command

    with psycopg.connect(dsn, autocommit=True) as conn:
        check_server_version(conn.info.server_version)
    logger.info("upgrading %s to %s", _database_name(dsn), revision)
    config = _config(dsn)
    config.attributes["sync_roles"] = True
    config.attributes["roles_prefix"] = roles_prefix
    with _alembic_lock:
        alembic.command.upgrade(config, revision)
    _log_revision(dsn)


def downgrade(dsn: str, revision: str) -> None:
    """Migrate the database at `dsn` down to `revision` (``"base"`` removes pgq's tables entirely).

    Same transaction, locking and connection handling as `upgrade`. Downgrading to base DROPS pgq's
    tables and every job in them; the schema `pgq` and its version table stay. Raises psycopg errors
    when the database cannot be reached or the DDL fails (nothing changed), and
    alembic.util.CommandError for an unknown revision.
    """
    import alembic.command

    logger.info("downgrading %s to %s", _database_name(dsn), revision)
    with _alembic_lock:
        alembic.command.downgrade(_config(dsn), revision)
    _log_revision(dsn)


def upgrade_sql(dsn: str | None = None) -> str:
    """Return the SQL script `upgrade(dsn)` would run, for a DBA to review and run with psql.

    With `dsn`, the script starts at the database's current revision (read over a short connection
    of its own); with None, or for a database pgq never migrated, it creates the whole schema. The
    script is one transaction that takes the migration advisory lock and records the new revision in
    `pgq.alembic_version`. Nothing is executed. When the database is already at the head revision the
    script is only a comment saying so.
    """
    import alembic.command

    head = head_revision()
    start = current_revision(dsn) if dsn is not None else None
    if start == head:
        return f"-- pgq: the database is already at revision {head} (head); nothing to do.\n"
    buffer = io.StringIO()
    header = (
        f"-- pgq schema upgrade from {start or 'an empty database'} to revision {head}.\n"
        "-- Generated by pgq.migrate.upgrade_sql(); run it with: psql -v ON_ERROR_STOP=1 -f <file>\n\n"
    )
    with _alembic_lock:
        alembic.command.upgrade(_config(None, output_buffer=buffer), f"{start}:head" if start else "head", sql=True)
    return header + buffer.getvalue()


def ensure_migrated(conn: psycopg.Connection[Any]) -> None:
    """Raise NotMigrated unless the database of `conn` is at this pgq's head revision.

    The caller owns `conn`: it is left open, in the transaction state it was found in (the check runs in
    its own transaction, or in a savepoint when one is already open). Takes no locks. A database
    migrated by a newer pgq (a revision this one does not know) raises NotMigrated as well.
    """
    with conn.transaction():
        revisions = _read_revisions(conn)
    head = head_revision()
    if revisions == [head]:
        return
    if not revisions:
        raise NotMigrated(
            f"pgq's schema is missing from this database (expected revision {head}): "
            "run `pgq migrate` or pgq.migrate.upgrade(dsn)"
        )
    raise NotMigrated(
        f"the database is at pgq revision {', '.join(revisions)}, this pgq needs {head}: run `pgq migrate` "
        "or pgq.migrate.upgrade(dsn) (if the database is newer, upgrade pgq instead)"
    )


def execute_schema_file(name: str) -> None:
    """Execute `sql/schema/<name>` in the migration alembic is running (for pgq's revision files).

    Its `-- pgq:function` directives are first replaced by the definitions they name (pgq._schema).
    Online, the file goes verbatim to the migration's own psycopg connection, inside its transaction;
    without parameters psycopg interprets no placeholders, so `%`, `:` and `$fn$` bodies arrive intact.
    Offline (`--sql`, `upgrade_sql`), the text is written verbatim to the script. Only valid while an
    alembic revision runs; raises psycopg errors when the DDL fails.
    """
    import alembic.context
    import alembic.op

    text = schema_file(name)
    if alembic.context.is_offline_mode():
        alembic.op.get_context().impl.static_output(text.rstrip("\n"))
        return
    driver = alembic.op.get_bind().connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(f"pgq migrations need a psycopg connection, got {type(driver).__name__}")
    driver.execute(text)  # pgq's own DDL file, never user input
