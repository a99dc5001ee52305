"""`pgq migrate` adopts no role set (issue 40, finding 7). Roles are cluster-wide and CONNECT is
PUBLIC by default: a first migrate of a fresh database granted another team's existing default
roles and made their admin the owner, silently; `pgq roles --prefix X --apply` then left the old
set's grants in place. Now the first migrate grants nothing, names the sets it found and the command
that grants one; `--apply` names the other sets that keep rights, and `--revoke` takes them."""

from __future__ import annotations

import psycopg
import pytest

import pgq.roles
from pgq.cli import main

from .conftest import Roles
from .test_grants_follow_migrations import OWNERS, bare_roles  # noqa: F401 (a fixture)
from .test_roles import assert_refused, rows


def test_a_first_migrate_grants_no_role_set_that_exists_for_other_databases(
    bare_roles: tuple[pgq.roles.RoleNames, str], pgq_empty_dsn: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # bare_roles first: the database is dropped before the roles. Its roles stand for another team's
    # set of pgq's default names (the default prefix itself is not safe to create in a shared cluster).
    names, _ = bare_roles
    prefix = names.producer.removesuffix("producer")
    monkeypatch.setattr(pgq.roles, "DEFAULT_PREFIX", prefix)
    assert main(["migrate", "--dsn", pgq_empty_dsn]) == 0
    out = capsys.readouterr().out
    assert rows(pgq_empty_dsn, OWNERS) == rows(pgq_empty_dsn, "SELECT current_user AS owner")
    grants = """
        SELECT count(*) AS n FROM pg_catalog.pg_class c, aclexplode(c.relacl) a
        WHERE c.relnamespace = 'pgq'::regnamespace AND a.grantee = ANY(%s::regrole[])"""
    assert rows(pgq_empty_dsn, grants, [[names.producer, names.worker, names.admin]]) == [{"n": 0}]
    assert (f"role set {prefix} exists in the cluster but has no rights here (not granted): "
            f"`pgq roles --prefix {prefix} --apply` grants it") in out
    assert "role sets kept granted: none" in out


def test_applying_another_set_names_the_old_one_and_revoke_takes_its_rights(
    roles: Roles, capsys: pytest.CaptureFixture[str],
) -> None:
    old = roles.names.producer.removesuffix("producer")
    new = f"{old}n_"
    try:
        assert main(["roles", "--apply", "--prefix", new, "--dsn", roles.dsn]) == 0
        out = capsys.readouterr().out
        assert f"note: role set {old}: granted, every queue; `pgq roles --prefix {old} --revoke`" in out
        assert main(["roles", "--list", "--dsn", roles.dsn]) == 0
        listed = capsys.readouterr().out
        assert f"{new}: owns schema pgq, every queue" in listed and f"{old}: granted, every queue" in listed
        assert main(["migrate", "--dsn", roles.dsn]) == 0
        assert f"role set {old} has rights here that migrate does not keep current" in capsys.readouterr().out
        assert main(["roles", "--revoke", "--prefix", old, "--dsn", roles.dsn]) == 0
        assert_refused(roles.producer, "SELECT count(*) FROM pgq.jobs")
        assert_refused(roles.worker, "SELECT * FROM pgq.claim(NULL, NULL, 1, 60, 'w')")
        assert main(["roles", "--revoke", "--prefix", new, "--dsn", roles.dsn]) == 2
        assert "owns schema pgq" in capsys.readouterr().err
    finally:
        with psycopg.connect(roles.dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{new}producer", "{new}worker", "{new}admin"'.encode())
            for what in ("producer", "worker", "admin"):
                conn.execute(f'DROP ROLE IF EXISTS "{new}{what}"'.encode())
