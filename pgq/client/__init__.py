"""`Queue` and `AsyncQueue`: the producer and worker API of pgq.

Every method builds an operation from pgq._ops (validating its input before anything is sent) and
hands it to a driver; the two classes differ only in how they wait. Connections come from a
psycopg pool: one the queue creates from a DSN (and closes), or one the caller passes (and keeps).
Methods with a `conn=` parameter run on the caller's connection instead, inside the caller's
transaction, and never commit it.

One source: `AsyncQueue` is written in async_queue.py, and `Queue` (queue.py) is generated from it
by generate.py; common.py holds what both use.
"""

from .async_queue import AsyncQueue
from .common import DEFAULT_LEASE, PGBOUNCER_KWARGS, SPARE_MAX_AGE, WAIT_POLL_S, check_pgbouncer_pool, pool_kwargs
from .queue import Queue

__all__ = ["DEFAULT_LEASE", "PGBOUNCER_KWARGS", "SPARE_MAX_AGE", "WAIT_POLL_S", "AsyncQueue", "Queue",
           "check_pgbouncer_pool", "pool_kwargs"]
