"""A producer process for the tests that race producers across processes (not threads of one):
`python tests/producers.py MODE JSON`, the database in $PGQ_TEST_PRODUCER_DSN.

Every process of a test waits for the same wall-clock moment (`start_at` in JSON, time.time()) before
its first enqueue, so that they race from the start instead of one after the other as they come up.

Modes:
- `sequences`: `rounds` batches, each one job of kind `kind` per key of `keys` (rotated by `producer`,
  so batches lock their keys in different input orders) and a second job of the batch's first key;
  payload {"key", "n", "ms", "fail_first"} with n unique over all producers; odd rounds go through
  `enqueue` one job at a time instead of `enqueue_many`.
- `unique`: `rounds` times for each key of `keys` (in the same order in every producer, so that they
  meet on each key): in one transaction,
  `enqueue(kind, {"p": producer, "i": round}, dedupe_key=key, **options)` and a row in table
  `produced` (key, payload, job id). The row's id is taken after the enqueue took the key's lock,
  which it holds until commit: per key, `produced.id` follows commit order. The last round waits
  until `finale_after` seconds after the start, so that the producers race on it too (the last
  committed enqueue of a key is then one of several at once, not just the latest).

Prints nothing on success; exits non-zero with the traceback on any error.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

import pgq


def start(dsn: str, mode: str, args: list[dict[str, Any]], delay: float = 1.5) -> list[subprocess.Popen[str]]:
    """Start one producer process per element of `args` (each also given `producer`: its index, and
    `start_at`: `delay` seconds from now, time enough for them all to connect)."""
    start_at = time.time() + delay
    env = dict(os.environ, PGQ_TEST_PRODUCER_DSN=dsn)
    return [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), mode,
                              json.dumps({"producer": n, "start_at": start_at, **a})],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for n, a in enumerate(args)]


def finish(procs: list[subprocess.Popen[str]], timeout: float = 120.0) -> None:
    """Wait for the producer processes `start` started; raise AssertionError, with their output, if one
    failed or outran `timeout` seconds (all of them are killed then)."""
    deadline = time.monotonic() + timeout
    failed = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            if proc.returncode != 0:
                failed.append(f"producer {proc.pid} exited {proc.returncode}:\n{out}")
    except subprocess.TimeoutExpired:
        failed.append(f"producers still running after {timeout} s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert not failed, "\n".join(failed)


def _wait(start_at: float) -> None:
    while (left := start_at - time.time()) > 0:
        time.sleep(min(left, 0.01))


def sequences(queue: pgq.Queue, args: dict[str, Any]) -> None:
    """See the module docstring."""
    keys: list[str] = args["keys"]
    producer: int = args["producer"]
    fail_every: int = args.get("fail_every", 0)
    n = producer * 100_000
    for i in range(args["rounds"]):
        order = keys[(producer + i) % len(keys):] + keys[:(producer + i) % len(keys)]
        specs = []
        for key in [*order, order[0]]:
            n += 1
            specs.append(pgq.JobSpec(args["kind"], {"key": key, "n": n, "ms": (n * 7) % 15,
                                                    "fail_first": bool(fail_every) and n % fail_every == 0},
                                     queue=args["queue"], sequence_key=key))
        if i % 2:
            for spec in specs:
                queue.enqueue(spec.kind, spec.payload, queue=spec.queue, sequence_key=spec.sequence_key)
        else:
            queue.enqueue_many(specs)


def unique(queue: pgq.Queue, dsn: str, args: dict[str, Any]) -> None:
    """See the module docstring."""
    keys: list[str] = args["keys"]
    producer: int = args["producer"]
    options = dict(args["options"])
    for name in ("unique_for", "debounce"):
        if name in options:
            options[name] = dt.timedelta(seconds=options[name])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(args["rounds"]):
            if i == args["rounds"] - 1:
                _wait(args["start_at"] + args.get("finale_after", 0.0))
            for key in keys:
                payload = {"p": producer, "i": i}
                with conn.transaction():
                    job_id = queue.enqueue(args["kind"], payload, dedupe_key=key, conn=conn, **options)
                    conn.execute("INSERT INTO produced (key, payload, job_id) VALUES (%s, %s, %s)",
                                 (key, json.dumps(payload), job_id))


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    dsn = os.environ["PGQ_TEST_PRODUCER_DSN"]
    with pgq.Queue(dsn, max_size=1) as queue:
        queue.get(0)  # connect before the start
        _wait(args["start_at"])
        if mode == "sequences":
            sequences(queue, args)
        elif mode == "unique":
            unique(queue, dsn, args)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
