#!/usr/bin/env python3
"""What revision 0021 (issue 40: secret-derived claim keys, scope checks, row security) costs the
claim and the enqueue of the unscoped roles: A (revision 0018) against B (head), alternated A B B A.

    python bench/trust_boundaries.py --dsn postgresql://postgres@127.0.0.1:5432/postgres

Creates two scratch databases on that server (one per revision), and drops them at the end.

- claim: each round queues JOBS jobs (plain, limited: a kind with a concurrency limit, or grouped),
  then CONNS connections call pgq.claim(NULL, NULL, BATCH, 60, 'w') concurrently until none is left
  queued; wall µs per job.
- enqueue: one session of a LOGIN member of the unscoped producer role runs a DO block of N
  single-job enqueues in one transaction (rolled back), a plain INSERT (row security's check) or
  pgq.enqueue_many of one job (the scope check); CPU µs per enqueue, no commit in the measure.
Prints one line per round, then the median per side, and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgq import migrate
from pgq.roles import RoleNames, roles_sql

INSERT = ("INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, limited) "
          "VALUES ('k', '{}', 'q', 0, statement_timestamp(), 25, false)")
MANY = "PERFORM pgq.enqueue_many(ARRAY['k'], ARRAY['{}'::jsonb], ARRAY['q'], NULL, NULL, NULL, NULL, NULL, NULL)"


def setup(server: str, name: str, revision: str, prefix: str, login: str) -> str:
    """A fresh database at `revision`, with the roles of `prefix` and `login` in its producer role."""
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(server, dbname=name)
    migrate.upgrade(dsn, revision)
    script = roles_sql(prefix)
    if revision != "head":  # the roles script of head, less its revision-0021 step
        script = script[:script.index("-- 4. Revision 0021")] + "COMMIT;\n"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(script.encode())
        names = RoleNames.with_prefix(prefix)
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(names.producer), sql.Identifier(login)))
    return dsn


def claim_round(dsn: str, jobs: int, conns: int, batch: int, shape: str) -> float:
    """Wall µs per job for `conns` connections claiming `jobs` queued jobs of `shape`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgq.jobs CASCADE")
        conn.execute("DELETE FROM pgq.concurrency_limits")
        if shape == "limited":
            conn.execute("INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('k', 1000000)")
        conn.execute("INSERT INTO pgq.jobs (kind, limited, group_key) SELECT 'k', %s, %s FROM generate_series(1, %s)",
                     (shape != "plain", "g" if shape == "grouped" else None, jobs))
        conn.execute("VACUUM ANALYZE pgq.jobs")
    sessions = [psycopg.connect(dsn, autocommit=True) for _ in range(conns)]
    got = [0] * conns
    start = threading.Barrier(conns + 1)

    def work(i: int) -> None:
        start.wait()
        while True:
            row = sessions[i].execute("SELECT count(*) FROM pgq.claim(NULL, NULL, %s, 60, 'w')", (batch,)).fetchone()
            got[i] += row[0] if row else 0
            if not row or row[0] == 0:
                left = sessions[i].execute("SELECT EXISTS (SELECT 1 FROM pgq.jobs WHERE status = 'queued')").fetchone()
                if not left or not left[0]:
                    return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    for s in sessions:
        s.close()
    assert sum(got) == jobs, got
    return wall / jobs * 1e6


def enqueue_round(dsn: str, n: int, body: str) -> float:
    """CPU µs per enqueue of a DO block of `n` statements `body`, rolled back."""
    with psycopg.connect(dsn) as conn:
        began = time.perf_counter()
        conn.execute(f"DO $$ BEGIN FOR i IN 1..{n} LOOP {body}; END LOOP; END $$".encode())
        spent = time.perf_counter() - began
        conn.rollback()
    return spent / n * 1e6


def abba(rounds: int, run: Callable[[str], float], label: str) -> dict[str, Any]:
    """Run `run("A")` and `run("B")` alternated A B B A, `rounds` in all; print and return medians."""
    res: dict[str, list[float]] = {"A": [], "B": []}
    for side in ("ABBA" * (rounds // 4 + 1))[:rounds]:
        res[side].append(run(side))
        print(f"{label} {side} {res[side][-1]:.1f} us", flush=True)
    out = {s: {"median_us": round(statistics.median(v), 2), "all_us": [round(x, 2) for x in v]} for s, v in res.items()}
    print(f"{label}: A (0018) median {out['A']['median_us']} us, B (head) median {out['B']['median_us']} us")
    return out


def main() -> None:
    """Parse the arguments, run both ABBAs, print the summary; the scratch databases and roles go."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a superuser's connection to the server")
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--enqueues", type=int, default=4000)
    parser.add_argument("--shapes", default="plain,limited,grouped", help="claim shapes, comma-separated ('': none)")
    args = parser.parse_args()
    tag = secrets.token_hex(4)
    prefix, login = f"pgq_tb{tag}_", f"pgq_tb{tag}_login"
    names = {"A": f"pgq_tb{tag}_a", "B": f"pgq_tb{tag}_b"}
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
    summary: dict[str, Any] = {}
    try:
        dsns = {"A": setup(args.dsn, names["A"], "0018", prefix, login),
                "B": setup(args.dsn, names["B"], "head", prefix, login)}
        for shape in [s for s in args.shapes.split(",") if s]:
            summary[f"claim_{shape}"] = abba(args.rounds, lambda s, shape=shape: claim_round(
                dsns[s], args.jobs, args.conns, args.batch, shape), f"claim {shape}")
        for d in dsns.values():  # the same empty table on both sides
            with psycopg.connect(d, autocommit=True) as conn:
                conn.execute("TRUNCATE pgq.jobs CASCADE")
                conn.execute("VACUUM ANALYZE pgq.jobs")
        as_login = {s: make_conninfo(d, user=login) for s, d in dsns.items()}
        for label, body in (("enqueue insert", INSERT), ("enqueue_many", MANY)):
            summary[label.replace(" ", "_")] = abba(args.rounds, lambda s, body=body: enqueue_round(
                as_login[s], args.enqueues, body), label)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            for role in (login, f"{prefix}producer", f"{prefix}worker", f"{prefix}admin"):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
