"""A throwaway PostgreSQL cluster for the bench scripts whose measure is cluster-wide (WAL) or needs a
server of their own (callgrind), and a commit's tree to run a baseline's pgq from.

    from private_cluster import PrivateCluster, bindir, export_tree   # bench/ is the script's folder
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def bindir(given: str | None) -> Path:
    """The PostgreSQL server binaries: `given`, else `pg_config --bindir`, else the newest under
    /usr/lib/postgresql."""
    if given:
        return Path(given)
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and (Path(out) / "postgres").exists():
            return Path(out)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise SystemExit("no PostgreSQL server binaries found: pass --bindir")
    return found[-1].parent


def export_tree(rev: str, where: Path) -> Path:
    """Write `rev`'s pgq, sql and alembic folders into a new folder under `where`; return it."""
    tree = where / f"tree-{rev}"
    tree.mkdir()
    archive = where / f"{rev}.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "pgq", "sql", "alembic"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


class PrivateCluster:
    """A cluster initialised in `where` (which it owns) and started on a free port of 127.0.0.1, its
    server run under `wrapper` (a command prefix, e.g. valgrind's) if given; as the postgres user when
    this runs as root. `dsn` ends with '/': append a database name."""

    def __init__(self, bins: Path, where: Path, wrapper: list[str] | None = None, settings: str = "") -> None:
        self.bins, self.where = bins, where
        self.data = where / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(where, self.user)
        self._as_user([str(bins / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"])
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{where}'\n"
                       f"max_connections = 40\nshared_buffers = 128MB\n{settings}")
        log = (where / "server.log").open("w")
        self.proc = subprocess.Popen(self.user_cmd([*(wrapper or []), str(bins / "postgres"), "-D", str(self.data)]),
                                     stdout=log, stderr=subprocess.STDOUT)
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/"
        for _ in range(600):
            if subprocess.run([str(bins / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                              check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise SystemExit(f"the private server did not start: {where / 'server.log'}")

    def migrated_database(self, db: str, tree: Path) -> str:
        """Create database `db` anew (dropped first if it exists), migrate it with the pgq of `tree`
        (its own `pgq migrate`, run from the tree: `python -m` puts the working directory first on
        sys.path) and return its DSN."""
        import psycopg

        with psycopg.connect(self.dsn + "postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
            conn.execute(f"CREATE DATABASE {db}")
        subprocess.run([sys.executable, "-m", "pgq", "migrate", "--dsn", self.dsn + db],
                       env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree, check=True, stdout=subprocess.DEVNULL)
        return self.dsn + db

    def user_cmd(self, cmd: list[str]) -> list[str]:
        """`cmd` as the cluster's user."""
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def _as_user(self, cmd: list[str]) -> None:
        subprocess.run(self.user_cmd(cmd), check=True, stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        """Stop the server (fast shutdown)."""
        subprocess.run(self.user_cmd([str(self.bins / "pg_ctl"), "-D", str(self.data), "stop", "-m", "fast"]),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proc.wait(60)


class CallgrindCluster(PrivateCluster):
    """A private cluster whose server runs under valgrind's callgrind, one output file per backend
    (autovacuum off, so that no other backend runs)."""

    def __init__(self, bins: Path, where: Path) -> None:
        self.out = where / "cg"
        self.out.mkdir()
        if os.geteuid() == 0:  # the server runs as postgres
            shutil.chown(self.out, "postgres")
        super().__init__(bins, where, ["valgrind", "--tool=callgrind", "--vgdb=no", "--trace-children=yes",
                                       "--dump-instr=no", f"--callgrind-out-file={self.out}/cg.%p"],
                         "autovacuum = off\n")

    def instructions(self, pid: int) -> int:
        """The instructions backend `pid` ran, once it has exited and callgrind wrote its file."""
        path = self.out / f"cg.{pid}"
        for _ in range(600):
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1])
            time.sleep(0.1)
        raise RuntimeError(f"callgrind wrote no totals to {path}")


C = TypeVar("C", bound=PrivateCluster)


@contextmanager
def throwaway(kind: type[C], given_bindir: str | None, prefix: str) -> Iterator[tuple[C, Path]]:
    """A cluster of class `kind` in a new temporary folder (named with `prefix`), started with the
    binaries of `bindir(given_bindir)`; yields it and the folder (for exported trees and scripts),
    stops it and deletes the folder at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # the server may run as another user (postgres, when this runs as root)
        (tmp / "server").mkdir()
        cluster = kind(bindir(given_bindir), tmp / "server")
        try:
            yield cluster, tmp
        finally:
            cluster.stop()
