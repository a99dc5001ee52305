"""A real PgBouncer in transaction pooling mode in front of the test database.

The `bouncer` fixture starts Debian's `pgbouncer` binary for one test: a generated ini in a fresh
temp directory, a free TCP port on 127.0.0.1, trust authentication, and two database entries that
both point at the test's database (`pgq_dsn`, which may be the local server over TCP or the embedded
one over a unix socket):

- `pgq`: `default_pool_size = 2`, so the many client connections of a test really share two server
  connections, transaction by transaction;
- `pgq_single`: `pool_size = 1`, where every transaction of every client runs on one server
  connection (the deterministic way to show what session state does across clients).

PgBouncer refuses to run as root, so as root it runs as the owner of the server's socket directory
(the embedded server) or as `nobody` (TCP). Tests skip when the binary is absent.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
)


@dataclass
class Bouncer:
    """A running PgBouncer: client DSNs for both database entries, the direct DSN, its admin console."""

    dsn: str
    single_dsn: str
    direct_dsn: str
    admin_dsn: str
    log_path: Path

    def show(self, what: str) -> list[dict[str, Any]]:
        """Rows of `SHOW <what>` on the admin console (simple query protocol, as it requires)."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            result = conn.pgconn.exec_(f"SHOW {what}".encode())
            names = [result.fname(i) for i in range(result.nfields)]
            return [
                {(n or b"").decode(): _text(result.get_value(row, col)) for col, n in enumerate(names)}
                for row in range(result.ntuples)
            ]

    def stats(self, database: str = "pgq") -> dict[str, Any]:
        """The `SHOW STATS` row of one database entry."""
        rows = [r for r in self.show("STATS") if r["database"] == database]
        assert rows, f"no SHOW STATS row for {database!r}"
        return rows[0]

    def log(self) -> str:
        """What PgBouncer logged so far."""
        return self.log_path.read_text(errors="replace")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _quote(value: str) -> str:
    # PgBouncer's connection strings take libpq-style values; quote anything unusual.
    if value and all(c.isalnum() or c in "._/-" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _run_as(host: str) -> int | None:
    """The uid to run PgBouncer as: None (ourselves) unless we are root, which PgBouncer refuses."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        owner = os.stat(host).st_uid
        if owner != 0:
            return owner  # only the server's own user may reach a socket inside its data directory
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def bouncer(pgq_dsn: str) -> Iterator[Bouncer]:
    """A PgBouncer (transaction pooling) for this test's database; stopped after the test."""
    with running_bouncer(pgq_dsn) as running:
        yield running


@contextlib.contextmanager
def running_bouncer(direct_dsn: str) -> Iterator[Bouncer]:
    """Start a PgBouncer in front of the database of `direct_dsn`; stop it and remove its files on
    exit. Skips the test when the binary is absent; fails it when PgBouncer does not come up."""
    if PGBOUNCER is None:
        pytest.skip("the pgbouncer binary is not installed (Debian: apt-get install pgbouncer)")
    params = conninfo_to_dict(direct_dsn)
    host = str(params.get("host") or "/var/run/postgresql")
    server_port = str(params.get("port") or 5432)
    user = str(params.get("user") or getpass.getuser())
    dbname = str(params["dbname"])
    target = f"host={_quote(host)} port={server_port} dbname={_quote(dbname)} user={_quote(user)}"
    if params.get("password"):
        target += f" password={_quote(str(params['password']))}"
    uid = _run_as(host)
    work = Path(tempfile.mkdtemp(prefix="pgq-pgbouncer-"))
    log_path = work / "pgbouncer.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        (work / "users.txt").write_text(f'"{user}" ""\n')
        for attempt in range(3):  # another process may grab the free port before PgBouncer binds it
            port = _free_port()
            (work / "pgbouncer.ini").write_text(
                "[databases]\n"
                f"pgq = {target}\n"
                f"pgq_single = {target} pool_size=1\n"
                "[pgbouncer]\n"
                "listen_addr = 127.0.0.1\n"
                f"listen_port = {port}\n"
                "unix_socket_dir =\n"
                "auth_type = trust\n"
                f"auth_file = {work / 'users.txt'}\n"
                f"admin_users = {user}\n"
                "pool_mode = transaction\n"
                "default_pool_size = 2\n"
                "min_pool_size = 0\n"
                "reserve_pool_size = 0\n"
                "max_client_conn = 500\n"
                "server_login_retry = 1\n"
            )
            if uid is not None:
                for path in (work, *work.iterdir()):
                    os.chown(path, uid, -1)
            log = open(log_path, "ab")  # noqa: SIM115 - the child keeps its own copy
            try:
                proc = subprocess.Popen([PGBOUNCER, str(work / "pgbouncer.ini")], stdout=log,
                                        stderr=subprocess.STDOUT, user=uid)
            finally:
                log.close()
            client = make_conninfo(host="127.0.0.1", port=port, user=user, dbname="pgq", connect_timeout=2)
            if _wait_until_up(proc, client):
                break
            proc.wait(5)
            if "Address already in use" not in log_path.read_text(errors="replace") or attempt == 2:
                pytest.fail(f"pgbouncer did not start; its log:\n{log_path.read_text(errors='replace')}")
        yield Bouncer(
            dsn=client,
            single_dsn=make_conninfo(client, dbname="pgq_single"),
            direct_dsn=direct_dsn,
            admin_dsn=make_conninfo(client, dbname="pgbouncer"),
            log_path=log_path,
        )
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        with contextlib.suppress(OSError):
            print(f"--- pgbouncer log ---\n{log_path.read_text(errors='replace')[-4000:]}")
        shutil.rmtree(work, ignore_errors=True)


def _wait_until_up(proc: subprocess.Popen[bytes], dsn: str, timeout: float = 15.0) -> bool:
    """Poll until a client connection through PgBouncer runs a query; False when PgBouncer exited."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return False
        try:
            with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
