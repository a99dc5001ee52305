"""Property-based tests (hypothesis) of input validation: whatever a caller passes, pgq either accepts
it or refuses it with its own clear error, and a refused enqueue writes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgq import InvalidJob, JobSpec, Queue
from pgq._ops import parse_rate
from pgq.cli.args import parse_duration
from pgq.cron import Cron, CronError

from .conftest import SQL

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT,
                      st.lists(st.integers(), max_size=3), st.timedeltas())


@given(TEXT)
def test_durations_parse_to_non_negative_timedeltas_or_a_value_error(text: str) -> None:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        assert "invalid duration" in str(exc) or "duration" in str(exc)
        return
    assert isinstance(value, dt.timedelta) and value >= dt.timedelta(0)


@given(st.one_of(TEXT, st.tuples(ANY_VALUE, ANY_VALUE), ANY_VALUE))
def test_rates_parse_or_raise_invalid_job(rate: Any) -> None:
    try:
        count, per = parse_rate(rate)
    except InvalidJob as exc:
        assert "rate limit" in str(exc)
        return
    assert isinstance(count, int) and count >= 1 and 0 < per <= 86400


CRON_FIELD = st.one_of(st.sampled_from(["*", "*/5", "1-3", "0", "7", "mon", "jan", "L", "60", "-1", "*/0", "x"]),
                       TEXT.filter(lambda t: " " not in t and t != ""))


@given(st.lists(CRON_FIELD, min_size=0, max_size=7).map(" ".join))
@settings(max_examples=300)
def test_cron_expressions_parse_or_raise_cron_error(expr: str) -> None:
    try:
        cron = Cron.parse(expr)
    except CronError as exc:
        assert expr in str(exc) or "fields" in str(exc) or "cron" in str(exc)
        return
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    tick = cron.next_after(start, dt.timedelta(days=800))
    assert tick is None or (tick > start and tick.second == 0)


@given(kind=ANY_VALUE, queue=ANY_VALUE, priority=ANY_VALUE, max_attempts=ANY_VALUE, delay=ANY_VALUE)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bad_enqueue_arguments_raise_invalid_job_and_write_nothing(
    pgq_queue: Queue, db: SQL, kind: Any, queue: Any, priority: Any, max_attempts: Any, delay: Any
) -> None:
    before = db("SELECT count(*) AS n FROM pgq.jobs")[0]["n"]
    try:
        spec = JobSpec(kind, {}, queue=queue, priority=priority, max_attempts=max_attempts, delay=delay)
        job_id = pgq_queue.enqueue_many([spec])[0]
    except InvalidJob:
        assert db("SELECT count(*) AS n FROM pgq.jobs")[0]["n"] == before
        return
    row = db("SELECT kind, queue, priority FROM pgq.jobs WHERE id = %s", [job_id])[0]
    assert (row["kind"], row["queue"], row["priority"]) == (kind, queue, priority)


@pytest.mark.parametrize("argv", [["enqueue"], ["enqueue", "k", "--priority", "x"], ["purge", "--older-than", "-1d"],
                                  ["jobs", "show", "abc"], ["queue", "pause"]])
def test_bad_command_lines_exit_2_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from pgq.cli import main

    assert main([*argv, "--dsn", "postgresql://nowhere.invalid/x"]) == 2
    assert "usage: pgq" in capsys.readouterr().err
