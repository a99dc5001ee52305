"""Group limits declared on tasks (`group_concurrency=`, `group_rate_limit=`), with real worker
processes racing on them: the history shows the limits never exceeded and every job run once."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import pgq

from .. import history
from .conftest import DB, WorkerProcess, wait_for

Spawn = Callable[..., WorkerProcess]


@pytest.mark.slow
def test_worker_processes_never_exceed_group_limits_and_run_each_job_once(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn, capsys: pytest.CaptureFixture[str]
) -> None:
    history.install(db.conn)
    rng = random.Random(11)
    specs = [pgq.JobSpec("grouped", {"account": f"a{n % 5}", "n": n, "ms": rng.choice((5, 40, 80))},
                         queue="groups", group_key=f"a{n % 5}") for n in range(80)]
    specs += [pgq.JobSpec("grouped_paced", {"account": f"p{n % 2}", "n": 1000 + n, "ms": 5},
                          queue="groups", group_key=f"p{n % 2}") for n in range(12)]
    rng.shuffle(specs)
    pgq_queue.enqueue_many(specs)
    workers = [spawn_worker("--queue", "groups", "--concurrency", "6", "--log-level", "WARNING", "--name", f"w{i}",
                            env={"PGQ_TEST_GROUPS": "1"}) for i in range(3)]
    wait_for(lambda: db.value("SELECT count(*) FROM pgq.jobs WHERE status <> 'succeeded'") == 0, 60,
             "every grouped job to succeed", interval=0.1)
    # The workers stored their tasks' limits at start.
    assert db.rows("SELECT kind, max_running, max_starts, per_s FROM pgq.group_limits ORDER BY kind") == [
        {"kind": "grouped", "max_running": 2, "max_starts": None, "per_s": None},
        {"kind": "grouped_paced", "max_running": None, "max_starts": 3, "per_s": 0.5}]
    report = history.check(db.conn)
    with capsys.disabled():
        print(f"\ngroups under 3 worker processes: {report.summary()}")
    assert report.violations == {}
    assert report.counts["claim"] == len(specs)  # each job claimed once: nothing lost, nothing run twice
    assert db.value("SELECT count(*) FROM effects WHERE note = 'effect'") == len(specs)
    # The race was real: some claim found a group at its limit, 18 slots for 5 groups of 2.
    assert db.value("SELECT max(running_of_group) FROM history WHERE kind = 'grouped'") == 2
    # 6 starts per account at 3 per half second: each account's starts span at least half a second.
    spans = db.rows("SELECT group_key, extract(epoch FROM max(started_at) - min(started_at)) AS s FROM history "
                    "WHERE event = 'claim' AND kind = 'grouped_paced' GROUP BY 1")
    assert len(spans) == 2 and all(s["s"] >= 0.5 for s in spans), spans
    for worker in workers:
        assert worker.alive()
