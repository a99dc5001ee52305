"""`pgq migrate` keeps the grants of pgq's roles current in its own transaction when the roles exist
(issue 30: a DBA had to run `pgq roles` again after every upgrade, and a forgotten run meant workers
failing with "permission denied" right after it), and changes nothing of roles when they do not."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

import pgq
from pgq import migrate
from pgq.errors import PgqError
from pgq.models import JobStatus
from pgq.roles import RoleNames
from pgq.testing import Server

from .conftest import Roles


def _rows(dsn: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query.encode(), params).fetchall()


OWNERS = """
    SELECT DISTINCT pg_catalog.pg_get_userbyid(relowner) AS owner FROM pg_catalog.pg_class
    WHERE relnamespace = 'pgq'::regnamespace AND relkind IN ('r', 'v', 'S')
    UNION SELECT pg_catalog.pg_get_userbyid(nspowner) FROM pg_catalog.pg_namespace WHERE nspname = 'pgq'
"""


@pytest.fixture
def bare_roles(pgq_server: Server) -> Iterator[tuple[RoleNames, str]]:
    """pgq's three roles created by hand (no `pgq roles`, no database touched), with one LOGIN role
    in each; yields the names and the password. Dropped at the end."""
    prefix = f"pgq_g{secrets.token_hex(5)}_"
    names = RoleNames.with_prefix(prefix)
    password = secrets.token_hex(16)
    created: list[str] = []
    try:
        with pgq_server.admin() as conn:
            for role in (names.producer, names.worker, names.admin):
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
                created.insert(0, role)
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                    sql.Identifier(role + "_l"), sql.Literal(password), sql.Identifier(role)))
                created.insert(0, role + "_l")
        yield names, password
    finally:
        with pgq_server.admin() as conn:
            for role in created:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_migrating_a_fresh_database_grants_the_existing_roles(bare_roles: tuple[RoleNames, str],
                                                              pgq_empty_dsn: str) -> None:
    # bare_roles first: the database (whose objects the roles own) is dropped before the roles.
    names, password = bare_roles
    prefix = names.producer.removesuffix("producer")
    migrate.upgrade(pgq_empty_dsn, roles_prefix=prefix)  # and no `pgq roles`
    assert _rows(pgq_empty_dsn, OWNERS) == [{"owner": names.admin}]
    producer = make_conninfo(pgq_empty_dsn, user=names.producer + "_l", password=password)
    worker = make_conninfo(pgq_empty_dsn, user=names.worker + "_l", password=password)
    with pgq.Queue(producer) as p:
        job_id = p.enqueue("k", queue="q")
    with pgq.Queue(worker) as w:
        (claim,) = w.claim(worker="w", queues=["q"])
        assert w.complete(claim) is JobStatus.SUCCEEDED
    with pgq.Queue(producer) as p, pytest.raises(psycopg.errors.InsufficientPrivilege):
        p.claim(worker="p", queues=["q"])
    assert _rows(pgq_empty_dsn, "SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [
        {"status": "succeeded"}]


def test_an_upgrade_hands_new_objects_to_the_roles_found_by_the_schema_owner(roles: Roles) -> None:
    # The database of `pgq roles --prefix <random>`: down one revision and up again, as the superuser,
    # with no prefix given. The objects the last revision creates anew must not stay the superuser's.
    head = migrate.head_revision()
    migrate.downgrade(roles.dsn, "-1")
    with psycopg.connect(roles.dsn, autocommit=True) as conn:  # drift: a grant lost since
        conn.execute(sql.SQL("REVOKE ALL ON pgq.jobs FROM {}").format(sql.Identifier(roles.names.worker)))
    migrate.upgrade(roles.dsn)
    assert migrate.current_revision(roles.dsn) == head
    assert _rows(roles.dsn, OWNERS) == [{"owner": roles.names.admin}]
    with pgq.Queue(roles.producer) as p:
        p.enqueue("k", queue="q")
    with pgq.Queue(roles.worker) as w:
        (claim,) = w.claim(worker="w", queues=["q"])
        assert w.complete(claim) is JobStatus.SUCCEEDED


def test_without_roles_migrate_creates_and_grants_nothing(pgq_empty_dsn: str) -> None:
    # Roles are cluster-wide, and other tests (other processes of a parallel run, other runs on a
    # shared server) create and drop their own meanwhile: look at the names pgq's SQL creates roles
    # under (sql/roles/, the only CREATE ROLE it has), and at every grant below.
    default = RoleNames.with_prefix()
    names = [default.producer, default.worker, default.admin]
    pgq_roles = "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(%s) ORDER BY 1"
    before = _rows(pgq_empty_dsn, pgq_roles, [names])
    migrate.upgrade(pgq_empty_dsn)
    assert _rows(pgq_empty_dsn, pgq_roles, [names]) == before
    me = _rows(pgq_empty_dsn, "SELECT current_user AS owner")
    assert _rows(pgq_empty_dsn, OWNERS) == me
    # No grant to anyone but the owner on any of pgq's tables.
    assert _rows(pgq_empty_dsn, """
        SELECT c.relname FROM pg_catalog.pg_class c, aclexplode(c.relacl) a
        WHERE c.relnamespace = 'pgq'::regnamespace AND a.grantee <> c.relowner""") == []


def test_roles_asked_for_that_do_not_exist_fail_the_migration_whole(pgq_empty_dsn: str) -> None:
    with pytest.raises(PgqError, match="pgq roles"):
        migrate.upgrade(pgq_empty_dsn, roles_prefix=f"pgq_none{secrets.token_hex(4)}_")
    assert migrate.current_revision(pgq_empty_dsn) is None
