"""Role sets side by side: scoped sets boxed in their queues, the listing, and revoking one.

A role set is the roles `pgq roles --prefix P` names: ``Pproducer``, ``Pworker`` and, for the
unscoped set that owns pgq's objects, ``Padmin`` (see pgq.roles). A scoped set (`pgq roles --prefix P
--queues q1,q2`, revision 0021) has no admin: its producer enqueues and reads only in its queues
and its worker claims and rescues only there (``sql/roles/pgq_roles_scoped.sql``: the unscoped
grants, a row of pgq.role_scopes that pgq's functions check the session's login against, and a
restrictive row security policy on pgq.jobs). Roles are cluster-wide, so a set may exist for other
databases only; `list_role_sets` tells which sets have rights in this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from ._sql import data_dir, query
from .errors import PgqError
from .roles import RoleNames

__all__ = ["RoleSet", "apply_scoped", "list_role_sets", "revoke_role_set", "scoped_sql", "sync_scoped"]


@dataclass(frozen=True, slots=True)
class RoleSet:
    """One role set of the cluster as seen from one database: its prefix; whether it has an admin
    role and that role owns schema pgq (`pgq migrate` keeps the set current); whether it has any
    right in this database (`granted`); and its queues when it is scoped (None: unscoped)."""

    prefix: str
    has_admin: bool
    owns_pgq: bool
    granted: bool
    queues: tuple[str, ...] | None

    def describe(self) -> str:
        """One line: the prefix, what the set is here, and its queues."""
        what = "owns schema pgq" if self.owns_pgq else ("granted" if self.granted else "no rights here")
        scope = f"queues {', '.join(self.queues)}" if self.queues is not None else "every queue"
        return f"{self.prefix}: {what}, {scope}"


def check_queues(queues: Sequence[str]) -> tuple[str, ...]:
    """Return `queues` without duplicates, in order. Raises ValueError when there is none, or one is
    empty or holds a NUL."""
    kept = tuple(dict.fromkeys(queues))
    if not kept or any(not q or "\x00" in q for q in kept):
        raise ValueError("a scoped role set needs one or more non-empty queue names")
    return kept


def _scoped_script(names: RoleNames, queues: tuple[str, ...]) -> sql.Composed:
    roles_dir = data_dir("sql") / "roles"
    grants = (roles_dir / "pgq_roles.sql").read_text(encoding="utf-8")
    grants = grants[grants.index("-- 3. Grants."):]  # the unscoped grants, without roles and ownership
    template = "\n".join(
        [(roles_dir / "pgq_roles_scoped.sql").read_text(encoding="utf-8"), grants,
         (roles_dir / "pgq_roles_scoped_tail.sql").read_text(encoding="utf-8")])
    prefix = names.producer.removesuffix("producer")
    return sql.SQL(template).format(  # pgq's own files, never user input; names and queues are quoted
        producer=sql.Identifier(names.producer),
        worker=sql.Identifier(names.worker),
        producer_name=sql.Literal(names.producer),
        worker_name=sql.Literal(names.worker),
        prefix_name=sql.Literal(prefix),
        policy=sql.Identifier(f"{prefix}scope"),
        queues=sql.SQL("ARRAY[{}]::text[]").format(sql.SQL(", ").join(sql.Literal(q) for q in queues)),
    )


def scoped_sql(prefix: str, queues: Sequence[str]) -> str:
    """Return the script (one transaction) that sets up the role set `prefix` boxed in `queues`, for
    a DBA to review and run with ``psql -v ON_ERROR_STOP=1``. Connects to nothing. Raises ValueError
    for a bad prefix or queue list."""
    script = _scoped_script(RoleNames.with_prefix(prefix), check_queues(queues))
    return sql.Composed([sql.SQL("BEGIN;\n\n"), script, sql.SQL("\nCOMMIT;\n")]).as_string(None)


def list_role_sets(conn: psycopg.Connection[Any]) -> list[RoleSet]:
    """Every role set of the cluster, with what it holds in `conn`'s database (which must be
    migrated to revision 0021 or later), by prefix. Reads only."""
    return [RoleSet(str(r[0]), bool(r[1]), bool(r[2]), bool(r[3]), None if r[4] is None else tuple(r[4]))
            for r in conn.execute(query("roles/role_sets"))]


def _owner_check(conn: psycopg.Connection[Any], prefix: str, doing: str) -> None:
    for found in list_role_sets(conn):
        if found.prefix == prefix and found.owns_pgq:
            raise PgqError(f"role set {prefix} owns schema pgq: it cannot be {doing} (apply another unscoped "
                           "set first, or leave it as it is)")


def apply_scoped(dsn: str, prefix: str, queues: Sequence[str]) -> RoleNames:
    """Set up (or update) the role set `prefix` boxed in `queues` on the database at `dsn` (migrated),
    in one transaction, and return its role names (no admin role: `admin` names none that exists).
    Needs CREATEROLE when a role is missing and the rights to grant on pgq's objects (their owner, a
    member of it, or a superuser). Raises ValueError for a bad prefix or queue list, PgqError when
    the set is the one owning pgq, and psycopg errors from the server."""
    names = RoleNames.with_prefix(prefix)
    script = _scoped_script(names, check_queues(queues))
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        _owner_check(conn, prefix, "scoped")
        conn.execute(script)
    return names


def sync_scoped(conn: psycopg.Connection[Any]) -> list[str]:
    """Re-run the script of every scoped set of pgq.role_scopes whose roles exist, in `conn`'s open
    transaction (`pgq migrate` calls it after the unscoped set's): new objects get their grants.
    Returns their prefixes."""
    kept: list[str] = []
    row = conn.execute("SELECT to_regclass('pgq.role_scopes') IS NOT NULL").fetchone()
    if row is None or not row[0]:  # a revision older than 0021
        return kept
    for found in list_role_sets(conn):
        if found.queues is not None:
            conn.execute(_scoped_script(RoleNames.with_prefix(found.prefix), found.queues))
            kept.append(found.prefix)
    return kept


def revoke_role_set(dsn: str, prefix: str) -> RoleSet:
    """Take every right of the role set `prefix` in the database at `dsn` (migrated): grants on
    schema pgq and its objects, its scope and its row security policy. Its roles stay (they are
    cluster-wide). Returns the set as it was. Raises ValueError for a bad prefix, PgqError when no
    such set exists or it owns schema pgq, and psycopg errors from the server."""
    names = RoleNames.with_prefix(prefix)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        found = {s.prefix: s for s in list_role_sets(conn)}.get(prefix)
        if found is None:
            raise PgqError(f"there is no role set {prefix} ({names.producer} and {names.worker})")
        _owner_check(conn, prefix, "revoked")
        roles = [names.producer, names.worker] + ([names.admin] if found.has_admin else [])
        template = (data_dir("sql") / "roles" / "roles_revoke.sql").read_text(encoding="utf-8")
        conn.execute(sql.SQL(template).format(
            roles=sql.SQL(", ").join(sql.Identifier(r) for r in roles),
            policy=sql.Identifier(f"{prefix}scope"),
            prefix_name=sql.Literal(prefix),
        ))
    return found
