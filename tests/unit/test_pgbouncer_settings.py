"""Settings for running behind PgBouncer: validation, and what they do to connection kwargs."""

from __future__ import annotations

import pytest

import pgq
from pgq.cli import build_parser
from pgq.client import pool_kwargs
from pgq.worker import WorkerConfig


def test_pool_kwargs_disable_prepared_statements_only_for_pgbouncer() -> None:
    assert pool_kwargs(False) == {"autocommit": True}
    assert pool_kwargs(True) == {"autocommit": True, "prepare_threshold": None}


def test_app_with_pgbouncer_connects_without_prepared_statements() -> None:
    assert pgq.App("dbname=x").connect_kwargs == {}
    app = pgq.App("dbname=x", pgbouncer=True)
    assert app.pgbouncer is True and app.connect_kwargs == {"prepare_threshold": None}


def test_worker_config_rejects_listen_dsn_without_listen() -> None:
    with pytest.raises(pgq.InvalidJob, match="listen_dsn"):
        WorkerConfig(listen=False, listen_dsn="dbname=x")
    with pytest.raises(pgq.InvalidJob, match="listen_dsn"):
        WorkerConfig(listen_dsn="")
    with pytest.raises(pgq.InvalidJob, match="pgbouncer"):
        WorkerConfig(pgbouncer="yes")  # type: ignore[arg-type]
    config = WorkerConfig.build(listen_dsn="host=db", pgbouncer=True)
    assert config.listen_dsn == "host=db" and config.pgbouncer is True


def test_worker_command_takes_pgbouncer_and_listen_dsn() -> None:
    args = build_parser().parse_args(["worker", "m:app", "--pgbouncer", "--listen-dsn", "host=db"])
    assert args.pgbouncer is True and args.listen_dsn == "host=db"
    args = build_parser().parse_args(["status", "--pgbouncer"])
    assert args.pgbouncer is True
    args = build_parser().parse_args(["worker", "m:app"])
    assert args.pgbouncer is False and args.listen_dsn is None
