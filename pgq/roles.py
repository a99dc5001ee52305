"""Least privilege: the SQL that creates pgq's three roles and grants them exactly what they need.

Roles are cluster-wide and creating them needs CREATEROLE, which the user running `pgq migrate` often
lacks, so no migration creates them. `roles_sql()` renders `sql/roles/pgq_roles.sql` for a DBA (the
`pgq roles` command prints it); `apply_roles()` runs it. The script is idempotent, and
`sync_grants()`, which `pgq migrate` calls in its transaction, re-runs it whenever the roles exist, so
the objects of a new revision get their owner and grants at once. The schema side (enqueue as a
SECURITY DEFINER function, the trigger that keeps cancel and retry to administrators) is revision 0002.

- ``<prefix>producer``: enqueue (through pgq.enqueue / pgq.enqueue_many) and read; writes no table.
- ``<prefix>worker``: a producer that also claims jobs, completes, fails, heartbeats and snoozes the
  attempts it holds, rescues expired leases (all through SECURITY DEFINER functions that check the
  lease token, revision 0011: it has no UPDATE on pgq.jobs), enqueues periodic ticks and sets
  concurrency limits. It cannot change a job it does not hold, delete (so it skips retention),
  cancel, retry, truncate or change the schema.
- ``<prefix>admin``: owns schema pgq and its objects: cancel, retry, purge, migrate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

from ._sql import data_dir, query
from .errors import PgqError

__all__ = ["DEFAULT_PREFIX", "RoleNames", "apply_roles", "roles_sql", "sync_grants"]

DEFAULT_PREFIX: Final = "pgq_"

# Plain lower-case identifiers only: the names a DBA types unquoted in psql and GRANT statements.
_PREFIX = re.compile(r"[a-z_][a-z0-9_]*")
_MAX_NAME = 63  # NAMEDATALEN - 1


@dataclass(frozen=True, slots=True)
class RoleNames:
    """The names of the three roles: ``<prefix>producer``, ``<prefix>worker``, ``<prefix>admin``."""

    producer: str
    worker: str
    admin: str

    @classmethod
    def with_prefix(cls, prefix: str = DEFAULT_PREFIX) -> RoleNames:
        """Names built from `prefix`. Raises ValueError unless the prefix is a lower-case identifier
        (letters, digits, underscores; not starting with a digit or with the reserved ``pg_``) short
        enough for the longest name to fit in 63 bytes."""
        if not _PREFIX.fullmatch(prefix) or prefix.startswith("pg_"):
            raise ValueError(
                f"invalid role prefix {prefix!r}: use lower-case letters, digits and underscores, "
                "not starting with a digit or 'pg_'"
            )
        if len(prefix) + len("producer") > _MAX_NAME:
            raise ValueError(f"role prefix {prefix!r} is too long: role names have at most {_MAX_NAME} bytes")
        return cls(f"{prefix}producer", f"{prefix}worker", f"{prefix}admin")


def _script(names: RoleNames) -> sql.Composed:
    template = (data_dir("sql") / "roles" / "pgq_roles.sql").read_text(encoding="utf-8")
    # Role names are identifiers, which cannot be bound parameters: they are quoted by psycopg
    # (Identifier) where SQL names a role and passed as literals (Literal) where SQL compares names.
    return sql.SQL(template).format(  # pgq's own file, never user input
        producer=sql.Identifier(names.producer),
        worker=sql.Identifier(names.worker),
        admin=sql.Identifier(names.admin),
        producer_name=sql.Literal(names.producer),
        worker_name=sql.Literal(names.worker),
        admin_name=sql.Literal(names.admin),
    )


def _transaction(script: sql.Composed) -> sql.Composed:
    return sql.Composed([sql.SQL("BEGIN;\n\n"), script, sql.SQL("\nCOMMIT;\n")])


def roles_sql(prefix: str = DEFAULT_PREFIX) -> str:
    """Return the roles script (one transaction) for roles named with `prefix`, for a DBA to review
    and run with ``psql -v ON_ERROR_STOP=1``. Connects to nothing. Raises ValueError for a bad prefix.
    """
    return _transaction(_script(RoleNames.with_prefix(prefix))).as_string(None)


def sync_grants(conn: psycopg.Connection[Any], prefix: str | None = None) -> RoleNames | None:
    """Make pgq's roles own and be granted exactly what the roles script gives them, in `conn`'s open
    transaction (the migration's): `pgq migrate` calls it after the revisions ran. Returns the roles
    kept current, or None when there are none, and then changes nothing.

    The roles are those of `prefix` when given, else those named after the owner of schema pgq
    (``<prefix>admin``, after `pgq roles` ran on this database); a prefix counts only when its three
    roles all exist (this creates none). Roles that exist for other databases only, even those of
    DEFAULT_PREFIX, are never granted unasked (pgq.role_sets.list_role_sets names them). Needs the rights of the
    script's ownership step: a superuser, or a member of the admin role that owns pgq's objects.
    Raises ValueError for a bad `prefix`, PgqError when the roles of a given `prefix` do not all
    exist, and psycopg errors (InsufficientPrivilege ...) from the server.
    """
    if prefix is not None:
        RoleNames.with_prefix(prefix)
    row = conn.execute(query("roles/roles_prefix"), {"prefix": prefix}).fetchone()
    if row is None or (prefix is not None and row[0] != prefix):
        if prefix is not None:
            raise PgqError(f"the roles {prefix}producer, {prefix}worker and {prefix}admin do not all exist: "
                           "create them with `pgq roles`")
        return None
    names = RoleNames.with_prefix(str(row[0]))
    conn.execute(_script(names))
    return names


def apply_roles(dsn: str, prefix: str = DEFAULT_PREFIX) -> RoleNames:
    """Run the roles script on the database at `dsn` (in pgq's schema, which must be migrated) and
    return the role names.

    Opens and closes its own connection; the script is one transaction, so on any error nothing
    changed. Needs CREATEROLE when a role is missing, and a superuser or the owner of pgq's objects
    (member of the admin role) for the ownership step. Raises ValueError for a bad prefix and
    psycopg errors (InsufficientPrivilege, InvalidSchemaName ...) from the server.
    """
    names = RoleNames.with_prefix(prefix)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_transaction(_script(names)))
    return names
