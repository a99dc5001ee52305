"""Run a worker of worker_app.app in this process: `python tests/worker/runner.py [options]`.

Used by the subprocess tests (the `pgq worker` command is tested elsewhere). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import worker_app

import pgq


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue", action="append", dest="queues")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--drain-timeout", type=float, default=10.0)
    parser.add_argument("--rescue-interval", type=float, default=None)
    parser.add_argument("--name", default=None)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--listen-dsn", default=None)
    parser.add_argument("--io-timeout", type=float, default=None)
    parser.add_argument("--ack-delay", type=float, default=None, help="default: the worker's")
    parser.add_argument("--async", action="store_true", dest="use_async",
                        help="asyncio.run(worker.run_async()) with its defaults, instead of worker.run()")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    worker = pgq.Worker(
        worker_app.app,
        queues=args.queues, concurrency=args.concurrency, lease=args.lease, poll_interval=args.poll_interval,
        drain_timeout=args.drain_timeout, claimed_by=args.name, rescue_interval=args.rescue_interval,
        listen_dsn=args.listen_dsn, io_timeout=args.io_timeout,
        **({} if args.ack_delay is None else {"ack_delay": args.ack_delay}),
    )
    if args.use_async:
        asyncio.run(worker.run_async())
    else:
        worker.run()
    logging.getLogger("runner").info("worker exited cleanly")


if __name__ == "__main__":
    main()
