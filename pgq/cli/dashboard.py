"""`pgq dashboard`: serve the web dashboard and its JSON API (pgq.web) with uvicorn."""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import socket
import sys
from typing import cast

from .args import int_range, seconds_arg
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Commands,
    Formatter,
    check_database,
    connect_dsn,
    describe_dsn,
    load_cli_app,
    resolve_dsn,
)

__all__ = ["ENV_AUTH", "LOOPBACK_NAMES", "is_loopback", "register"]

ENV_AUTH = "PGQ_DASHBOARD_AUTH"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""The Host names a dashboard served without --auth answers to (with the --host it listens on)."""
WEB_EXTRA = "pip install 'pgq-jobs[web]'"


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "dashboard",
        parents=[dsn],
        formatter_class=Formatter,
        help="serve the web dashboard and its JSON API",
        description=(
            "Serve pgq's dashboard: the queues, jobs, workers, schedules and limits, live, with\n"
            "cancel / retry / pause / resume buttons, and the same as JSON under /api/. What it may\n"
            "change follows the database role of the DSN (pgq_admin may do everything).\n"
            "It listens on 127.0.0.1 unless told otherwise, and refuses any other address without\n"
            f"--auth. Needs the web extra: {WEB_EXTRA}."
        ),
    )
    p.add_argument("--host", metavar="HOST", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; anything but a loopback address needs --auth)")
    p.add_argument("--port", metavar="PORT", type=int_range("port", 1, 65535), default=8787,
                   help="port to listen on (default: 8787)")
    p.add_argument("--auth", metavar="USER:PASSWORD", default=None,
                   help=f"require these credentials (HTTP Basic) on every page and API call (default: ${ENV_AUTH}); "
                        f"given here, the password shows in `ps` to other users of the machine: prefer ${ENV_AUTH}")
    p.add_argument("--read-only", action="store_true",
                   help="show everything, change nothing: every action answers 403 and no button is shown")
    p.add_argument("--app", metavar="MODULE:APP", default=None,
                   help="your pgq App (as for `pgq worker`), to list its periodic schedules and their next run")
    p.add_argument("--refresh", metavar="SECONDS", type=seconds_arg("--refresh", positive=True), default=5.0,
                   help="seconds between live updates of the overview, workers and job pages (default: 5)")
    p.set_defaults(handler=cmd_dashboard)


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address or a name) means this machine only: a loopback address, or a
    name all of whose addresses are loopback ones. An empty host (every interface) or a name that does
    not resolve is not."""
    if not host:
        return False
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            return False
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_loopback:
            return False
    return bool(addresses)


def _auth(args: argparse.Namespace) -> str | None:
    auth: str | None = args.auth or os.environ.get(ENV_AUTH) or None
    if auth is not None:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise CliError("--auth must look like USER:PASSWORD, both non-empty", EXIT_USAGE)
    return auth


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`pgq dashboard`: check the address, the extra and the database, then serve until stopped."""
    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    auth = _auth(args)
    if auth is None and not is_loopback(args.host):
        raise CliError(
            f"refusing to serve the dashboard on {args.host!r} without --auth: anyone who reaches that address "
            f"could cancel jobs and pause queues; pass --auth USER:PASSWORD (or set {ENV_AUTH}), or listen on "
            "127.0.0.1", EXIT_USAGE)
    if importlib.util.find_spec("uvicorn") is None:
        raise CliError(f"the pgq dashboard needs the web extra (uvicorn is not installed): {WEB_EXTRA}")
    try:
        from ..web import create_app
    except ImportError as exc:
        raise CliError(str(exc)) from None
    import uvicorn

    app = load_cli_app(args.app) if args.app else None
    check_database(dsn)
    # Without a password, answer only to this machine's names: a page elsewhere that re-points its own
    # name at 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the dashboard.
    hosts = None if auth is not None else LOOPBACK_NAMES | {args.host.strip("[]").lower()}
    dashboard = create_app(dsn, auth=auth, read_only=args.read_only, app=app, refresh_s=args.refresh,
                           pgbouncer=args.pgbouncer, allowed_hosts=hosts)
    host = f"[{args.host}]" if ":" in args.host else args.host
    notes = [n for n in ("read-only" if args.read_only else "", "password required" if auth else "") if n]
    print(f"pgq dashboard on http://{host}:{args.port}/ for {describe_dsn(dsn)}"
          + (f" ({', '.join(notes)})" if notes else ""), file=sys.stderr, flush=True)
    if auth is not None and not is_loopback(args.host):
        print("pgq: warning: HTTP Basic sends the password in clear text: serve the dashboard behind a TLS proxy",
              file=sys.stderr, flush=True)
    uvicorn.run(dashboard, host=args.host, port=args.port, log_level="info", server_header=False)
    return EXIT_OK
