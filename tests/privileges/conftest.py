"""A database with pgq's roles applied, and one LOGIN role per pgq role to connect as.

Roles are cluster-wide and other test runs may share the server, so every role name carries a
random prefix (`pgq roles --prefix`), and every role is dropped at the end: first the database
(which takes the objects the admin role owns and the grants with it), then the roles.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgq.roles import RoleNames, apply_roles
from pgq.testing import Server


@dataclass(frozen=True)
class Roles:
    """DSNs of one database: as its superuser (`dsn`) and as a login member of each pgq role."""

    names: RoleNames
    dsn: str
    producer: str
    worker: str
    admin: str


@pytest.fixture
def roles(pgq_server: Server, pgq_template_dsn: str) -> Iterator[Roles]:
    """A fresh migrated database with `pgq roles --apply` run on it, and LOGIN roles `<prefix>p`,
    `<prefix>w`, `<prefix>a` that are members of the producer, worker and admin roles."""
    prefix = f"pgq_t{secrets.token_hex(5)}_"
    names = RoleNames.with_prefix(prefix)
    password = secrets.token_hex(16)
    logins = {"producer": f"{prefix}p", "worker": f"{prefix}w", "admin": f"{prefix}a"}
    template = str(conninfo_to_dict(pgq_template_dsn)["dbname"])
    try:
        with pgq_server.scratch_database("pgq_r_", template) as dsn:
            apply_roles(dsn, prefix)
            with psycopg.connect(dsn, autocommit=True) as conn:
                for what, login in logins.items():
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                        sql.Identifier(login), sql.Literal(password), sql.Identifier(getattr(names, what))))
            yield Roles(
                names, dsn,
                *(make_conninfo(dsn, user=logins[w], password=password) for w in ("producer", "worker", "admin")),
            )
    finally:
        with pgq_server.admin() as conn:
            for role in [*logins.values(), names.worker, names.producer, names.admin]:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
