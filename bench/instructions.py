#!/usr/bin/env python3
"""The server's instructions per job of a claim and of an acknowledgement, counted by callgrind:
the one measure of the hot path that the load of a shared machine does not move.

    python3 bench/instructions.py                        # this checkout against caf8cde
    python3 bench/instructions.py --baseline v0.2.0 --claim-batch 512 --complete-batch 150
    python3 bench/instructions.py --wake 200 --keep /tmp/cg  # W4: enqueue, claim, next_run_at, ack

A private PostgreSQL cluster (initdb in a temporary folder, the server binaries of `pg_config
--bindir` or --bindir) runs under `valgrind --tool=callgrind`, each backend counting its own
instructions. Each side (the working tree, and `git archive BASELINE` of the named commit) gets a
database migrated by its own `pgq migrate` and --jobs queued jobs, then four sessions run that side's
`pgq._ops.claim` and `pgq._ops.complete`, each session in its own backend:

1. two claims of --claim-batch (the warm-up: catalog caches, plans);
2. the same two claims, then claims until the queue is empty;
3. two completes of --complete-batch (the warm-up);
4. the same two completes, then completes of every job claimed in 2;
5. two enqueues of --enqueue-batch jobs (the warm-up), in a queue of their own;
6. the same two enqueues, then --jobs jobs more in batches of --enqueue-batch.

Instructions per job: (2 - 1) and (4 - 3), divided by the jobs claimed after the warm-up, and (6 - 5)
divided by --jobs. With --heartbeat N, instead: one claim of --complete-batch jobs, then one session
renews their leases twice (the warm-up) and another 2 + N times, each renewal one `pgq._ops.heartbeat`
of them all, as a worker sends it every lease/3; instructions per renewal and per job renewed. With
--wake N, instead: N wake-ups of an idle worker (W4), each counted whole, statement by statement, each
statement in a backend of its own: the enqueue of one job, the claim that takes it, the worker's
next_run_at after that short claim, and the job's acknowledgement; instructions per wake-up of each, a
run of 20 wake-ups (the warm-up) subtracted. --extra-sql FILE runs FILE in the working tree's database
after its migration, to measure a prototype of a change without a revision. The counts
repeat to within a few hundred instructions per job between runs, so one run per side is enough;
the time a run takes (valgrind runs the server some 50 times slower) does not enter them. What they
do not see: the client, the wait for locks and I/O, and other sessions (run W3 for those:
bench/baseline.py). Needs valgrind and a PostgreSQL server of the version to measure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from private_cluster import ROOT, CallgrindCluster, export_tree, throwaway

PHASES = r'''
import os, sys
import psycopg
from pgq import _ops
dsn, phase, b, c = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
state = sys.argv[5]
conn = psycopg.connect(dsn, autocommit=True)
print(conn.execute("SELECT pg_backend_pid()").fetchone()[0], flush=True)
def claim():
    return _ops.run_sync(conn, _ops.claim(worker="w", queues=["bench"], kinds=["bench"], limit=b, lease=3600),
                         own_transaction=True)
def complete(part):
    _ops.run_sync(conn, _ops.complete([(x, None, None) for x in part], raise_lost=False), own_transaction=True)
import pickle
if phase in ("enqueue-warm", "enqueue"):
    from pgq import JobSpec
    def enqueue(n):
        _ops.run_sync(conn, _ops.enqueue([JobSpec("bench", {"i": i}, queue="enq") for i in range(n)]),
                      own_transaction=True)
    e, jobs = int(os.environ["PGQ_INSTR_ENQUEUE"]), int(os.environ["PGQ_INSTR_JOBS"])
    enqueue(e)
    enqueue(e)
    if phase == "enqueue":
        for i in range(0, jobs, e):
            enqueue(min(e, jobs - i))
elif phase in ("claim-warm", "claim"):
    got = claim() + claim()
    if phase == "claim":
        warm = len(got)
        while True:
            more = claim()
            if not more:
                break
            got += more
        with open(state, "wb") as f:
            pickle.dump((got, warm), f)
else:
    with open(state, "rb") as f:
        got, warm = pickle.load(f)
    head, rest = got[:2 * c], got[warm:]
    for i in range(0, len(head), c):
        complete(head[i:i + c])
    if phase == "complete":
        for i in range(0, len(rest), c):
            complete(rest[i:i + c])
        print(len(rest), flush=True)
conn.close()
'''

WAKE = r'''
import inspect, sys
import psycopg
import pgq
from pgq import _ops
dsn, n, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kinds = None if sys.argv[4] == "any" else ["bench"]
# Each statement of a wake in a backend of its own, so that each is counted apart: the worker's
# next_run_at runs in the pool's next connection, as the claim's may be busy.
producer, worker, acks, idle = (psycopg.connect(dsn, autocommit=True) for _ in range(4))
pid = "SELECT pg_backend_pid()"
print(*(c.execute(pid).fetchone()[0] for c in (producer, worker, acks, idle)), flush=True)
spec = pgq.JobSpec(kind="bench", payload={"i": 1}, queue="bench")
busy = {"busy": set()} if "busy" in inspect.signature(_ops.complete).parameters else {}
for _ in range(n):
    _ops.run_sync(producer, _ops.enqueue([spec]), own_transaction=True)
    got = _ops.run_sync(worker, _ops.claim(worker="w", queues=["bench"], kinds=kinds, limit=limit, lease=3600),
                        own_transaction=True)
    assert len(got) == 1, got
    # The claim came back short: the idle worker asks when the next job is due (its _sleep_until_due).
    _ops.run_sync(idle, _ops.next_run_at(["bench"]), own_transaction=True)
    # As the worker's acknowledger sends it, where the tree has that argument: busy rows skipped.
    _ops.run_sync(acks, _ops.complete([(x, None, None) for x in got], raise_lost=False, **busy), own_transaction=True)
for c in (producer, worker, acks, idle):
    c.close()
'''


HEARTBEAT = r'''
import pickle, sys
import psycopg
from pgq import _ops
dsn, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = psycopg.connect(dsn, autocommit=True)
print(conn.execute("SELECT pg_backend_pid()").fetchone()[0], flush=True)
if n == 0:  # the claim the renewals hold
    got = _ops.run_sync(conn, _ops.claim(worker="w", queues=["bench"], kinds=["bench"], limit=int(sys.argv[4]),
                                         lease=3600), own_transaction=True)
    with open(state, "wb") as f:
        pickle.dump(got, f)
    print(len(got), flush=True)
else:
    with open(state, "rb") as f:
        claims = pickle.load(f)
    for _ in range(n):
        renewed = _ops.run_sync(conn, _ops.heartbeat([(c, 3600.0) for c in claims], raise_lost=True),
                                own_transaction=True)
        assert len(renewed) == len(claims), renewed
conn.close()
'''


def copy_written(cluster: CallgrindCluster, pid: int, to: Path) -> None:
    """Copy backend `pid`'s callgrind file to `to` once callgrind has written all of it: its summary
    line (what `instructions` reads) comes in the header, its totals line last."""
    path = cluster.out / f"cg.{pid}"
    for _ in range(600):
        if any(line.startswith("totals:") for line in path.read_text(errors="replace").splitlines()[-5:]):
            shutil.copyfile(path, to)
            return
        time.sleep(0.1)
    raise RuntimeError(f"callgrind did not finish writing {path}")


def measure_heartbeat(cluster: CallgrindCluster, name: str, tree: Path, beats: int, batch: int,
                      tmp: Path) -> float:
    """Instructions per renewal of the leases of `batch` jobs of one claim (`pgq._ops.heartbeat`, as a
    worker sends it) for the pgq of `tree`: a session of 2 + `beats` renewals less one of 2."""
    import psycopg

    db = f"beat_{name}"
    cluster.migrated_database(db, tree)
    env = dict(os.environ, PYTHONPATH=str(tree))
    with psycopg.connect(cluster.dsn + db, autocommit=True) as conn:
        conn.execute("INSERT INTO pgq.jobs (queue, kind, payload) "
                     "SELECT 'bench', 'bench', '{\"i\": 1}' FROM generate_series(1, %s)", (batch,))
        conn.execute("VACUUM ANALYZE pgq.jobs")
    script, state = tmp / "heartbeat.py", tmp / f"{name}-claims.pickle"
    script.write_text(HEARTBEAT)
    counts: dict[int, int] = {}
    for n in (0, 2, 2 + beats):
        out = subprocess.run([sys.executable, str(script), cluster.dsn + db, str(state), str(n), str(batch)],
                             env=env, check=True, capture_output=True, text=True).stdout.split()
        if n == 0:
            assert int(out[1]) == batch, out
        counts[n] = cluster.instructions(int(out[0]))
    return (counts[2 + beats] - counts[2]) / beats


def measure(cluster: CallgrindCluster, name: str, tree: Path, jobs: int, b: int, c: int, e: int, tmp: Path,
            keep: Path | None = None, label: str = "") -> tuple[float, float, float]:
    """Instructions per job of claims, of completes and of enqueues (batches of `e`, through
    pgq._ops.enqueue, as Queue.enqueue_many sends them) for the pgq of `tree`; with `keep`, each
    phase's callgrind file is copied there as LABEL-PHASE.cg (for callgrind_annotate)."""
    import psycopg

    db = f"instr_{name}"
    cluster.migrated_database(db, tree)
    env = dict(os.environ, PYTHONPATH=str(tree), PGQ_INSTR_ENQUEUE=str(e), PGQ_INSTR_JOBS=str(jobs))
    with psycopg.connect(cluster.dsn + db, autocommit=True) as conn:
        conn.execute("INSERT INTO pgq.jobs (queue, kind, payload) "
                     "SELECT 'bench', 'bench', '{\"i\": 1}' FROM generate_series(1, %s)", (jobs + 4 * b,))
        conn.execute("VACUUM ANALYZE pgq.jobs")
    script, state = tmp / "phases.py", tmp / f"{name}.pickle"
    script.write_text(PHASES)
    counts: dict[str, int] = {}
    done = 0
    for phase in ("claim-warm", "claim", "complete-warm", "complete", "enqueue-warm", "enqueue"):
        out = subprocess.run([sys.executable, str(script), cluster.dsn + db, phase, str(b), str(c), str(state)],
                             env=env, check=True, capture_output=True, text=True).stdout.split()
        counts[phase] = cluster.instructions(int(out[0]))
        if keep is not None:
            copy_written(cluster, int(out[0]), keep / f"{label or name}-{phase}.cg")
        if phase == "complete":
            done = int(out[1])
    return ((counts["claim"] - counts["claim-warm"]) / done, (counts["complete"] - counts["complete-warm"]) / done,
            (counts["enqueue"] - counts["enqueue-warm"]) / jobs)


WAKE_PARTS = ("enqueue", "claim", "complete", "next_run_at")


def measure_wake(cluster: CallgrindCluster, name: str, tree: Path, wakes: int, limit: int,
                 tmp: Path, keep: Path | None = None, label: str = "",
                 extra_sql: str | None = None) -> dict[str, float]:
    """Instructions per wake-up of an idle worker for the pgq of `tree`, by statement, each run in a
    backend of its own: the enqueue of one job into an empty queue (the producer's), the claim that
    takes it, asking for `limit` jobs (the worker's), the worker's next_run_at after its short claim,
    and the acknowledgement of the job (the acks connection's). With `extra_sql`, that SQL runs in the
    database after the migration (a prototype to measure). With `keep`, the longer run's callgrind
    files of the four backends are copied into it as SIDE-wake-PART.cg."""
    import psycopg

    db = f"wake_{name}"
    cluster.migrated_database(db, tree)
    if extra_sql:
        with psycopg.connect(cluster.dsn + db, autocommit=True) as conn:
            conn.execute(extra_sql)
    env = dict(os.environ, PYTHONPATH=str(tree))
    script = tmp / "wake.py"
    script.write_text(WAKE)
    # The claim asks for the kinds the tree's worker asks for: its app's since revision 0027, any before.
    kinds = "any" if "kinds=None" in (tree / "pgq" / "worker" / "producer.py").read_text() else "app"
    counts: dict[int, list[int]] = {}
    warm = 20
    for n in (warm, warm + wakes):
        out = subprocess.run([sys.executable, str(script), cluster.dsn + db, str(n), str(limit), kinds],
                             env=env, check=True, capture_output=True, text=True).stdout.split()
        counts[n] = [cluster.instructions(int(pid)) for pid in out[:4]]
        if keep is not None and n == warm + wakes:
            for pid, part in zip(out[:4], WAKE_PARTS, strict=True):
                copy_written(cluster, int(pid), keep / f"{label or name}-wake-{part}.cg")
    return {part: (counts[warm + wakes][i] - counts[warm][i]) / wakes for i, part in enumerate(WAKE_PARTS)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="caf8cde", help="the commit to compare with (default caf8cde)")
    parser.add_argument("--jobs", type=int, default=4000, help="jobs claimed and completed after the warm-up "
                        "(default 4,000)")
    parser.add_argument("--claim-batch", type=int, default=512, help="jobs per claim (default 512: the "
                        "worker's batch in W3 on 2 cores)")
    parser.add_argument("--complete-batch", type=int, default=150, help="jobs per acknowledgement (default "
                        "150: the worker's batch in W3 on 2 cores)")
    parser.add_argument("--enqueue-batch", type=int, default=1000, help="jobs per enqueue (default 1,000: "
                        "the shared harness's W2 batch)")
    parser.add_argument("--wake", type=int, metavar="N", help="instead: instructions per wake-up of an idle "
                        "worker (W4), over N wake-ups: the enqueue of one job, the claim that takes it, the "
                        "worker's next_run_at after that short claim and the job's acknowledgement")
    parser.add_argument("--wake-limit", type=int, default=16, help="jobs the wake-up's claim asks for (default "
                        "16: an idle worker of W4's concurrency asks for its free slots)")
    parser.add_argument("--heartbeat", type=int, metavar="N", help="instead: instructions per renewal of "
                        "the leases of --complete-batch jobs (a worker's heartbeat), over N renewals")
    parser.add_argument("--extra-sql", type=Path, metavar="FILE", help="with --wake: run this SQL in the "
                        "working tree's database after its migration (a prototype of a change to measure)")
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    parser.add_argument("--keep", type=Path, help="copy each phase's callgrind file into this folder, as "
                        "SIDE-PHASE.cg, to read with callgrind_annotate (where the instructions went)")
    opts = parser.parse_args()
    if opts.jobs < 1 or opts.claim_batch < 1 or opts.complete_batch < 1 or opts.enqueue_batch < 1:
        parser.error("--jobs and the batches must be at least 1")
    if opts.extra_sql is not None and not opts.wake:
        parser.error("--extra-sql is only for --wake")
    extra_sql = opts.extra_sql.read_text() if opts.extra_sql is not None else None
    if opts.keep is not None:
        opts.keep.mkdir(parents=True, exist_ok=True)
    if not shutil.which("valgrind"):
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    with throwaway(CallgrindCluster, opts.bindir, "pgq-instructions-") as (cluster, tmp):
        sides = {"HEAD": ROOT, opts.baseline: export_tree(opts.baseline, tmp)}
        if opts.heartbeat:
            print(f"instructions per heartbeat of {opts.complete_batch} leases, {opts.heartbeat} heartbeats "
                  f"({cluster.bins})")
            beats = {name: measure_heartbeat(cluster, f"s{i}", tree, opts.heartbeat, opts.complete_batch, tmp)
                     for i, (name, tree) in enumerate(sides.items())}
            for name, per in beats.items():
                print(f"  {name:>10}: heartbeat {per:11,.0f}  per job {per / opts.complete_batch:9,.0f}")
            print(f"  HEAD / {opts.baseline}: heartbeat {beats['HEAD'] / beats[opts.baseline]:.3f}")
            return 0
        if opts.wake:
            print(f"instructions per wake-up, {opts.wake} wake-ups, claims of up to {opts.wake_limit} "
                  f"({cluster.bins})")
            wakes = {name: measure_wake(cluster, f"s{i}", tree, opts.wake, opts.wake_limit, tmp, opts.keep, name,
                                        extra_sql if name == "HEAD" else None)
                     for i, (name, tree) in enumerate(sides.items())}
            for name, parts in wakes.items():
                print(f"  {name:>10}: " + "  ".join(f"{p} {parts[p]:9,.0f}" for p in WAKE_PARTS)
                      + f"  wake {sum(parts.values()):10,.0f}")
            head, base = wakes["HEAD"], wakes[opts.baseline]
            print(f"  HEAD / {opts.baseline}: " + "  ".join(f"{p} {head[p] / base[p]:.3f}" for p in WAKE_PARTS)
                  + f"  wake {sum(head.values()) / sum(base.values()):.3f}")
            return 0
        print(f"instructions per job, {opts.jobs} jobs, claims of {opts.claim_batch}, acknowledgements of "
              f"{opts.complete_batch}, enqueues of {opts.enqueue_batch} ({cluster.bins})")
        results: dict[str, tuple[float, float, float]] = {}
        for i, (name, tree) in enumerate(sides.items()):
            results[name] = measure(cluster, f"s{i}", tree, opts.jobs, opts.claim_batch, opts.complete_batch,
                                    opts.enqueue_batch, tmp, opts.keep, name)
            claim, complete, enqueue = results[name]
            print(f"  {name:>10}: claim {claim:9,.0f}  complete {complete:9,.0f}  both {claim + complete:9,.0f}"
                  f"  enqueue {enqueue:9,.0f}", flush=True)
        (hc, hk, he), (bc, bk, be) = results["HEAD"], results[opts.baseline]
        print(f"  HEAD / {opts.baseline}: claim {hc / bc:.3f}  complete {hk / bk:.3f}  "
              f"both {(hc + hk) / (bc + bk):.3f}  enqueue {he / be:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
