"""The worker: claims jobs, runs their handlers, acknowledges them in batches, keeps their leases
alive, runs maintenance, and drains on shutdown. asyncio only; sync handlers run in threads.

One module per part, each owning one concern (read bottom-up):

- `config`: `WorkerConfig`, the settings;
- `prefetch`: the adaptive prefetch decision (how many jobs to hold beyond the free slots);
- `threads`: the daemon threads that run plain `def` handlers;
- `outcome`: what a handler's exception becomes (retry when, or fail for good);
- `state`: what a running worker holds (slots, prefetch buffer, leased jobs) and its bookkeeping;
- `acks`: batched acknowledgements, at most one statement per kind of outcome per flush, each
  fenced by its lease token; a lost lease is logged, never raised;
- `leases`: the heartbeat renewing the leases of all jobs in flight in one statement every lease/3;
- `runner`: each job's handler in its own slot (a task for `async def`, a thread for `def`);
- `producer`: claims up to the free slots whenever jobs may be ready (NOTIFY, poll timer, a freed
  slot after a full claim);
- `maintenance`: rescue, periodic enqueue, retention, each run led by one worker at a time;
- `shutdown`: stop claiming, drain for up to `drain_timeout`, release the rest, flush;
- `worker`: `Worker`, which builds the parts for a run and owns their lifetime.

Every database step catches `psycopg.OperationalError` and retries with backoff: a Postgres restart
is logged and survived. Shutdown (`stop()`, SIGTERM or SIGINT): stop claiming, let running jobs
finish for up to `drain_timeout`, hand the others straight back to the queue (`release`: no attempt
spent, no waiting for lease expiry), flush acknowledgements, close. A second signal (or `abort()`)
skips the waiting.

Logs: logger "pgq.worker", one line when a job starts and one when it finishes, with `extra` fields
`event`, `job_id`, `kind`, `queue`, `attempt`, `duration_ms`, `outcome`.
"""

from __future__ import annotations

from .config import WorkerConfig, default_worker_name
from .prefetch import PREFETCH_FIRST_LOOK, PREFETCH_HORIZON, PREFETCH_MAX, PREFETCH_MAX_BYTES
from .worker import Worker, queue_warnings

__all__ = [
    "PREFETCH_FIRST_LOOK",
    "PREFETCH_HORIZON",
    "PREFETCH_MAX",
    "PREFETCH_MAX_BYTES",
    "Worker",
    "WorkerConfig",
    "default_worker_name",
    "queue_warnings",
]
