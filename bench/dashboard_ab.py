"""Two dashboards on one database, request by request: the server time of each GET route of
bench/dashboard.py in checkout A and in checkout B, measured alternately.

    python bench/dashboard_ab.py --dsn postgresql://postgres@127.0.0.1:5432/pgq_dash10m --a ../main

On a machine whose load moves (other test runs), two runs of bench/dashboard.py one after the other
differ by as much as the change measured: each route is measured at a different moment. Here both
dashboards serve at once (uvicorn on two free ports, each a process of its own that imports pgq from
its checkout's tree: PYTHONPATH), and each route is requested from A and B in turn, the order swapped
every round, `--warmup` rounds and then `--repeat`. Printed per route: the p50 and p95 of each side's
server time (its Server-Timing header) and the median of the rounds' B/A ratios, which the load
moves least. `--dsn` names a database filled by bench/dashboard.py (`--keep`), migrated for both
checkouts; it is only read (no action is measured), but for the registered workers' last_seen, kept
live as their heartbeats would. The routes are this checkout's (`--only` as in bench/dashboard.py); a
route that one side does not answer with 200 is reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
from dashboard import pct, routes, server_ms

HERE = Path(__file__).resolve().parent.parent

# What each side runs: the dashboard of the pgq it imports, with the bench's App (a periodic
# schedule tidy_up every 60 s, as bench/dashboard.py gives it), on 127.0.0.1:<port>.
SERVE = """
import sys
import uvicorn
import pgq
from pgq.web import create_app
app = pgq.App(sys.argv[1])
app.periodic(every=60, name="tidy_up")(lambda: None)
uvicorn.run(create_app(sys.argv[1], app=app, trust_network=True), host="127.0.0.1", port=int(sys.argv[2]),
            log_level="warning")
"""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(stack: ExitStack, tree: Path, dsn: str) -> httpx.Client:
    """Start the dashboard of checkout `tree` on `dsn`; a client of it, the server stopped at the
    stack's end."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, dsn, str(port)], env=env, cwd=tree)
    stack.callback(lambda: (proc.terminate(), proc.wait(timeout=20)))
    client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60))
    deadline = time.monotonic() + 30
    while True:
        try:
            client.get("/static/app.css")
            return client
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the dashboard of {tree} did not start") from None
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="the database both dashboards read (a kept bench fill)")
    parser.add_argument("--a", required=True, type=Path, help="checkout A (the baseline: its tree is imported)")
    parser.add_argument("--b", type=Path, default=HERE, help="checkout B (default: this one)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds per route before measuring (default 2)")
    parser.add_argument("--repeat", type=int, default=20, help="measured rounds per route (default 20)")
    parser.add_argument("--only", action="append", metavar="LABEL", help="as bench/dashboard.py's --only")
    args = parser.parse_args()
    sys.path.insert(0, str(args.b))
    from pgq.web import create_app  # B's routes decide which pages to measure

    paths = {getattr(r, "path", "") for r in create_app(args.dsn, trust_network=True).routes}
    gets, _ = routes(args.dsn, paths, args.only)
    width = max(len(label) for label, _, _ in gets)
    with ExitStack() as stack:
        a, b = serve(stack, args.a.resolve(), args.dsn), serve(stack, args.b.resolve(), args.dsn)
        beat = stack.enter_context(psycopg.connect(args.dsn, autocommit=True))
        print(f"{'route':<{width}}  {'A p50':>7}  {'B p50':>7}  {'A p95':>7}  {'B p95':>7}  {'B/A':>5}", flush=True)
        for label, path, headers in gets:
            beat.execute(b"UPDATE pgq.workers SET last_seen = now()")
            times: dict[str, list[float]] = {"a": [], "b": []}
            refused = ""
            for i in range(args.warmup + args.repeat):
                for side, client in (("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a)):
                    response = client.get(path, headers=headers)
                    if response.status_code != 200:
                        refused = f"{side.upper()}: HTTP {response.status_code}"
                        break
                    if i >= args.warmup:
                        times[side].append(server_ms(response))
                if refused:
                    break
            if refused:
                print(f"{label:<{width}}  skipped ({refused})", flush=True)
                continue
            ta, tb = times["a"], times["b"]
            ratio = statistics.median(y / x for x, y in zip(ta, tb, strict=True))
            print(f"{label:<{width}}  {statistics.median(ta):7.1f}  {statistics.median(tb):7.1f}  "
                  f"{pct(ta, 0.95):7.1f}  {pct(tb, 0.95):7.1f}  {ratio:5.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
