#!/usr/bin/env python3
"""The hot path against a fixed baseline: the shared harness's W2, W3 and W4 for pgq, alternated
between this checkout and a named baseline commit in one run, with the ratios.

    python3 bench/baseline.py                      # baseline caf8cde, 2 rounds (A B B A A B B A ...)
    python3 bench/baseline.py --baseline v0.2.0 --rounds 3 --procs 1,2 --n 20000

Each side runs the same harness code (a writable copy of ../shared/bench, made in a temporary folder)
with its own pgq on PYTHONPATH: the working tree for HEAD, `git archive BASELINE pgq sql alembic` for
the baseline. Database `bench_pgq` on the server of --dsn is dropped and created again before each side
runs, so that each side migrates its own schema (do not point this at a database you keep). Sides
alternate within a round and the order flips every round, so slow drift of the machine hits both.

`--peer NAME` (repeatable) runs another queue of the harness in the same rounds, after the two pgq
sides, from its virtualenv `$PEERBENCH_DIR/venv-NAME` (default /tmp/peerbench; the harness's
setup_venvs.sh makes them), with its own database and schema (the harness's install): its figures
are printed beside pgq's, with HEAD / NAME.

Prints one line per run and then, per workload, the median of each side and HEAD / baseline: jobs/s
(whole run and steady, from the first job done) for W2 and W3, W3's worker CPU per job (µs, the worker
processes' user and system time over the jobs done), and the wake-up p50 and p99 (ms) for W4, where a
ratio below 1 is better (and for CPU per job). Hot-path changes report this output next to the ABBA against the
commit before them; the baseline moves only when a release is cut and its figures are recorded
(bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT.parent / "shared" / "bench"


def export_tree(rev: str, where: Path) -> Path:
    """Write the baseline's pgq, sql and alembic folders (as of `rev`) into `where`; return it."""
    archive = where / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "pgq", "sql", "alembic"], stdout=out, check=True)
    tree = where / f"tree-{rev}"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def recreate_database(base_dsn: str, name: str = "bench_pgq") -> None:
    """Drop and create database `name` on the server of `base_dsn` (a DSN ending in '/')."""
    with psycopg.connect(base_dsn + "postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def run_side(harness: Path, tree: Path, base_dsn: str, out: Path, args: list[str],
             peer: str = "pgq", python: str = sys.executable) -> dict[str, object]:
    """Run one harness workload for pgq imported from `tree` (or for `peer` with its `python`); return
    the JSON record it appended."""
    env = dict(os.environ, PYTHONPATH=str(tree), BENCH_DSN=base_dsn, BENCH_OUT=str(out),
               BENCH_LOG_DIR=str(out.parent / "logs"), PYTHONDONTWRITEBYTECODE="1")
    if peer != "pgq":
        env.pop("PYTHONPATH")
    before = out.read_text().count("\n") if out.exists() else 0
    subprocess.run([python, "bench.py", "--peer", peer, *args], cwd=harness, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    lines = out.read_text().splitlines()
    if len(lines) <= before:
        raise RuntimeError(f"the harness wrote no record for {args}")
    record: dict[str, object] = json.loads(lines[-1])
    return record


def install(harness: Path, tree: Path, base_dsn: str) -> None:
    """Migrate a fresh bench_pgq with the pgq of `tree`."""
    recreate_database(base_dsn)
    env = dict(os.environ, PYTHONPATH=str(tree), BENCH_DSN=base_dsn, PYTHONDONTWRITEBYTECODE="1")
    subprocess.run([sys.executable, "bench.py", "--peer", "pgq", "install"], cwd=harness, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def figures(record: dict[str, object]) -> dict[str, float]:
    """The numbers this script compares, from one harness record."""
    keys = ("jobs_per_s", "steady_jobs_per_s", "lat_p50_ms", "lat_p99_ms")
    got = {k: float(v) for k in keys if isinstance((v := record.get(k)), int | float)}
    cpu, jobs = record.get("worker_cpu_s"), record.get("jobs")
    if isinstance(cpu, int | float) and isinstance(jobs, int) and jobs > 0:
        got["worker_cpu_us_per_job"] = round(cpu / jobs * 1e6, 1)  # W3: the worker processes' CPU per job
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="caf8cde", help="the baseline commit (default caf8cde)")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds, each runs both sides (default 2)")
    parser.add_argument("--procs", default="1,2", help="W3 worker processes, comma-separated (default 1,2)")
    parser.add_argument("--n", type=int, default=20000, help="W3 jobs (default 20,000)")
    parser.add_argument("--workloads", default="w2,w3,w4", help="any of w2,w3,w4 (default all three)")
    parser.add_argument("--peer", action="append", default=[],
                        help="another queue of the harness to run in the same rounds (repeatable), from "
                             "$PEERBENCH_DIR/venv-NAME")
    parser.add_argument("--harness", type=Path, default=HARNESS,
                        help=f"the shared harness to copy (default {HARNESS})")
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/"),
                        help="server base DSN ending in '/' (default $BENCH_DSN or the local server)")
    opts = parser.parse_args()
    if not opts.dsn.endswith("/"):
        parser.error("--dsn must end in '/' (the harness appends the database name)")
    if opts.rounds < 1 or opts.n < 1:
        parser.error("--rounds and --n must be at least 1")
    if not opts.harness.is_dir():
        parser.error(f"the shared harness is not at {opts.harness} (--harness)")
    venvs = Path(os.environ.get("PEERBENCH_DIR", "/tmp/peerbench"))
    peers = {name: str(venvs / f"venv-{name}" / "bin" / "python") for name in opts.peer}
    for name, python in peers.items():
        if name == "pgq" or not Path(python).exists():
            parser.error(f"no virtualenv for peer {name!r} at {Path(python).parent.parent} (the harness's "
                         "setup_venvs.sh makes them)")
    workloads: list[tuple[str, list[str]]] = []
    for w in opts.workloads.split(","):
        if w == "w2":
            workloads.append(("w2", ["w2", "--reps", "1"]))
        elif w == "w3":
            for p in opts.procs.split(","):
                workloads.append((f"w3 p{p}", ["w3", "--reps", "1", "--concurrency", "16", "--procs", p,
                                               "--n", str(opts.n)]))
        elif w == "w4":
            workloads.append(("w4", ["w4", "--reps", "1", "--concurrency", "16"]))
        else:
            parser.error(f"unknown workload {w!r} (w2, w3 or w4)")

    with tempfile.TemporaryDirectory(prefix="pgq-baseline-") as tmp_name:
        tmp = Path(tmp_name)
        harness = tmp / "harness"
        shutil.copytree(opts.harness, harness, ignore=shutil.ignore_patterns("results", "scale"))
        for path in harness.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)
        sides = {"HEAD": ROOT, opts.baseline: export_tree(opts.baseline, tmp)}
        out = tmp / "runs.jsonl"
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for rnd in range(opts.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            for side in order + list(peers):
                if side in peers:
                    recreate_database(opts.dsn, f"bench_{side}")
                    subprocess.run([peers[side], "bench.py", "--peer", side, "install"], cwd=harness, check=True,
                                   env=dict(os.environ, BENCH_DSN=opts.dsn), stdout=subprocess.DEVNULL)
                else:
                    install(harness, sides[side], opts.dsn)
                for name, args in workloads:
                    if side in peers:
                        got = figures(run_side(harness, ROOT, opts.dsn, out, args, side, peers[side]))
                    else:
                        got = figures(run_side(harness, sides[side], opts.dsn, out, args))
                    results.setdefault((name, side), []).append(got)
                    shown = ", ".join(f"{k} {v:g}" for k, v in got.items())
                    print(f"round {rnd + 1} {side:>10} {name:<6} {shown}", flush=True)

    print(f"\nmedians over {opts.rounds} rounds; ratio = HEAD / {opts.baseline}")
    for name, _ in workloads:
        head, base = results[(name, "HEAD")], results[(name, opts.baseline)]
        for key in ("jobs_per_s", "steady_jobs_per_s", "lat_p50_ms", "lat_p99_ms", "worker_cpu_us_per_job"):
            if name == "w4" and key == "jobs_per_s":
                continue  # W4 enqueues at a fixed rate
            h = [r[key] for r in head if key in r]
            b = [r[key] for r in base if key in r]
            if not h or not b:
                continue
            mh, mb = statistics.median(h), statistics.median(b)
            ratio = mh / mb if mb else float("nan")
            line = f"{name:<6} {key:<18} HEAD {mh:>10.1f}  {opts.baseline} {mb:>10.1f}  ratio {ratio:.2f}"
            for peer in peers:
                p = [r[key] for r in results.get((name, peer), []) if key in r]
                if p:
                    mp = statistics.median(p)
                    line += f"  {peer} {mp:.1f} (HEAD / {peer} {mh / mp if mp else float('nan'):.2f})"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
