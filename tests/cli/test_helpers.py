"""The command line's pure helpers: durations, ages, tables, log formatters, app loading (no database)."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import sys

import pytest

from pgq.cli import (
    CliError,
    JsonLogFormatter,
    TextLogFormatter,
    connect_dsn,
    describe_dsn,
    format_age,
    format_duration,
    parse_duration,
    render_table,
    setup_logging,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("45s", 45), ("90", 90), ("2.5", 2.5), ("0", 0),
     ("1h30m", 5400), ("1D", 86400), (" 15m ", 900), ("1.5h", 5400)],
)
def test_parse_duration_accepts_units_and_plain_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "7x", "h", "-1", "1h-30m", "inf", "nan", "7 d", "1e20"])
def test_parse_duration_rejects_everything_else(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0s"), (-3, "0s"), (59.9, "59s"), (185, "3m05s"), (7260, "2h01m"),
     (3 * 86400 + 4 * 3600, "3d04h")],
)
def test_format_age_is_compact(seconds: float | None, text: str) -> None:
    assert format_age(seconds) == text


@pytest.mark.parametrize("text", ["7d", "1h30m", "45s", "0s", "2.5s", "1d00h"])
def test_format_duration_round_trips_through_parse_duration(text: str) -> None:
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


def test_render_table_aligns_columns_and_right_aligns_numbers() -> None:
    text = render_table(("NAME", "N"), [["a", "1"], ["longer", "100"]], right=(1,))
    assert text.splitlines() == ["NAME      N", "a         1", "longer  100"]


def test_connect_dsn_adds_a_connect_timeout_unless_given() -> None:
    assert "connect_timeout=5" in connect_dsn("postgresql://u@h/db")
    assert "connect_timeout=9" in connect_dsn("host=h connect_timeout=9")
    with pytest.raises(CliError) as info:
        connect_dsn("host=h password=s3cret garbage")
    assert "s3cret" not in str(info.value) and info.value.code == 2


def test_describe_dsn_never_shows_the_password() -> None:
    described = describe_dsn("postgresql://me:s3cret@db.example:6543/app")
    assert described == 'database "app" on db.example:6543' and "s3cret" not in described


def _record(exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad\nthing")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("pgq.worker", logging.INFO, __file__, 1, "job %s finished", (7,), exc_info)
    record.job_id = 7
    record.kind = "email send"
    return record


def test_json_formatter_writes_one_object_per_line_with_extra_fields() -> None:
    line = JsonLogFormatter().format(_record(exc=True))
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "job 7 finished" and data["level"] == "info" and data["logger"] == "pgq.worker"
    assert data["job_id"] == 7 and data["kind"] == "email send"
    assert "ValueError: bad" in data["exception"] and data["ts"].endswith("Z")


def test_text_formatter_keeps_an_event_on_one_line() -> None:
    line = TextLogFormatter().format(_record(exc=True))
    assert "\n" not in line
    assert "INFO    pgq.worker: job 7 finished job_id=7 kind=\"email send\" exception=\"Traceback" in line


def test_setup_logging_replaces_handlers_and_sets_level() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        setup_logging("WARNING", "json", stream)
        logging.getLogger("pgq.test").info("hidden")
        logging.getLogger("pgq.test").warning("shown", extra={"n": 1})
        [line] = stream.getvalue().splitlines()
        assert json.loads(line)["n"] == 1
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def test_logging_set_up_by_a_command_follows_sys_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in-process (a test) must not leave a handler on a stream closed since."""
    import logging
    import sys

    from pgq.cli.logs import setup_logging

    first, second = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        monkeypatch.setattr(sys, "stderr", first)
        setup_logging("INFO", "text")
        logging.getLogger("pgq.worker").info("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("pgq.worker").info("two")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert second.getvalue().rstrip().endswith("pgq.worker: two") and "Logging error" not in second.getvalue()


def _finish_line_both_ways(kind: str, outcome: str, seconds: float) -> tuple[str, str]:
    """The finish line of a job that ended without an error as `pgq worker`'s text log writes it:
    through its direct path (pgq.worker.outcome's sink) and through the logging module."""
    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import FINISH_LEVELS, finish_sink, job_extra

    now = dt.datetime.now(dt.UTC)
    job = Job(id=42, queue="mail q", kind=kind, payload={}, priority=0, status=JobStatus.RUNNING, run_at=now,
              attempts=2, max_attempts=5, dedupe_key=None, lease_token=None, lease_expires_at=now,
              claimed_by="w", last_error=None, result=None, input_watermark=None, done_watermark=None,
              created_at=now, started_at=now, finished_at=None)
    level = FINISH_LEVELS[outcome]
    direct = io.StringIO()
    setup_logging("INFO", "text", direct)
    sink = finish_sink()
    assert sink is not None and sink(level, job, outcome, seconds)
    through = io.StringIO()
    setup_logging("INFO", "text", through)
    logging.getLogger().handlers[0].setFormatter(TextLogFormatter())
    extra = {**job_extra(job, "job_finish"), "outcome": outcome, "duration_ms": round(seconds * 1000, 3)}
    logging.getLogger("pgq.worker").log(level, "job %d %s attempt %d/%d: %s (%.1f ms)", job.id, job.kind,
                                        job.attempts, job.max_attempts, outcome, seconds * 1000, extra=extra)
    # The same line but for the time stamp (to the millisecond) at its start.
    return direct.getvalue().split(" ", 1)[1], through.getvalue().split(" ", 1)[1]


@pytest.mark.parametrize(("kind", "outcome", "seconds"),
                         [("send_email", "succeeded", 0.0123456), ("a\nb=c", "snoozed", 2.5), ("k", "released", 0)])
def test_the_direct_finish_line_is_the_text_formatters_line(kind: str, outcome: str, seconds: float) -> None:
    direct, through = _finish_line_both_ways(kind, outcome, seconds)
    assert direct == through
    assert direct.count("\n") == 1


def test_the_direct_finish_line_keeps_each_kind_queue_and_outcome_apart() -> None:
    """The sink makes the parts of a line that depend on kind, queue and outcome once per such
    combination: lines of jobs that differ in any of them, written in turn, each name their own."""
    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import FINISH_LEVELS, finish_sink

    now = dt.datetime.now(dt.UTC)
    out = io.StringIO()
    setup_logging("INFO", "text", out)
    sink = finish_sink()
    assert sink is not None
    cases = [("a", "q1", "succeeded"), ("b", "q1", "succeeded"), ("a", "q2", "succeeded"), ("a", "q1", "snoozed"),
             ("a", "q1", "succeeded")]
    for i, (kind, queue, outcome) in enumerate(cases):
        job = Job(id=i, queue=queue, kind=kind, payload={}, priority=0, status=JobStatus.RUNNING, run_at=now,
                  attempts=1, max_attempts=3, dedupe_key=None, lease_token=None, lease_expires_at=now,
                  claimed_by="w", last_error=None, result=None, input_watermark=None, done_watermark=None,
                  created_at=now, started_at=now, finished_at=None)
        assert sink(FINISH_LEVELS[outcome], job, outcome, 0.001)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(cases)
    for i, (line, (kind, queue, outcome)) in enumerate(zip(lines, cases, strict=True)):
        assert f"job {i} {kind} attempt 1/3: {outcome} " in line
        assert f" job_id={i} kind={kind} queue={queue} attempt=1 outcome={outcome} " in line


def test_the_direct_finish_line_gives_way_to_any_other_handler_or_filter() -> None:
    from pgq.worker.outcome import finish_sink

    setup_logging("INFO", "text", io.StringIO())
    sink = finish_sink()
    assert sink is not None
    worker = logging.getLogger("pgq.worker")
    extra_handler = logging.NullHandler()
    worker.addHandler(extra_handler)  # an application's handler: every line must reach it
    try:
        assert not sink(logging.INFO, object(), "succeeded", 0.1)
    finally:
        worker.removeHandler(extra_handler)
    setup_logging("INFO", "text", io.StringIO(), quiet=True)
    sink = finish_sink()
    assert sink is not None
    handler = logging.getLogger().handlers[0]
    handler.addFilter(lambda r: True)  # a filter of the application's: the logging module decides
    try:
        assert not sink(logging.INFO, object(), "succeeded", 0.1)
    finally:
        handler.filters.pop()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_quiet_drops_the_finish_lines_below_warning_without_a_log_record(
        fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--quiet` leaves out a success's line before any LogRecord is made for its filter to drop
    (which cost a quiet worker more per job than writing the line); lines at WARNING and above are
    still written, the same way as without --quiet."""
    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import FINISH_LEVELS, finish_sink

    now = dt.datetime.now(dt.UTC)
    job = Job(id=7, queue="q", kind="k", payload={}, priority=0, status=JobStatus.RUNNING, run_at=now,
              attempts=1, max_attempts=3, dedupe_key=None, lease_token=None, lease_expires_at=now,
              claimed_by="w", last_error=None, result=None, input_watermark=None, done_watermark=None,
              created_at=now, started_at=now, finished_at=None)
    out = io.StringIO()
    setup_logging("INFO", fmt, out, quiet=True)
    made: list[logging.LogRecord] = []
    real = logging.Logger.makeRecord
    monkeypatch.setattr(logging.Logger, "makeRecord", lambda self, *a, **k: made.append(r := real(self, *a, **k)) or r)
    sink = finish_sink()
    assert sink is not None
    for outcome in ("succeeded", "snoozed", "released", "cancelled"):
        assert sink(FINISH_LEVELS[outcome], job, outcome, 0.01)
    assert out.getvalue() == "" and made == []
    warned = sink(FINISH_LEVELS["lease lost"], job, "lease lost", 0.01)
    if fmt == "text":
        assert warned and "job 7 k attempt 1/3: lease lost" in out.getvalue()
    else:
        assert not warned  # JSON lines go through the logging module, which writes it
    setup_logging("INFO", fmt, io.StringIO())
    sink = finish_sink()
    assert (sink is not None) == (fmt == "text")
    setup_logging("INFO", "json", io.StringIO())
    assert finish_sink() is None


def test_direct_finish_lines_of_one_event_loop_turn_go_out_together_at_its_end() -> None:
    import asyncio

    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import finish_sink

    out = io.StringIO()
    setup_logging("INFO", "text", out)
    sink = finish_sink()
    assert sink is not None
    now = dt.datetime.now(dt.UTC)
    jobs = [Job(id=i, queue="q", kind="k", payload={}, priority=0, status=JobStatus.RUNNING, run_at=now, attempts=1,
                max_attempts=3, dedupe_key=None, lease_token=None, lease_expires_at=now, claimed_by="w",
                last_error=None, result=None, input_watermark=None, done_watermark=None, created_at=now,
                started_at=now, finished_at=None) for i in (1, 2, 3)]

    async def turn() -> list[str]:
        for job in jobs:
            assert sink(logging.INFO, job, "succeeded", 0.001)
        during = out.getvalue()  # nothing yet: the turn has not ended
        await asyncio.sleep(0)
        return [during, out.getvalue()]

    during, after = asyncio.run(turn())
    assert during == ""
    assert [line.split(" job_id=")[1].split()[0] for line in after.splitlines()] == ["1", "2", "3"]


def test_the_direct_finish_lines_duration_is_the_logging_modules_for_any_duration() -> None:
    """The sink writes a duration's `duration_ms` field as its %.3f text without trailing zeros, not
    through round() and repr() (issue #47): the same text as the logging module's line, checked over
    many random durations, the halfway cases of the third decimal and the ends of its range."""
    import math
    import random

    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import finish_sink

    now = dt.datetime.now(dt.UTC)
    job = Job(id=1, queue="q", kind="k", payload={}, priority=0, status=JobStatus.RUNNING, run_at=now, attempts=1,
              max_attempts=3, dedupe_key=None, lease_token=None, lease_expires_at=now, claimed_by="w",
              last_error=None, result=None, input_watermark=None, done_watermark=None, created_at=now,
              started_at=now, finished_at=None)
    rnd = random.Random(47)
    seconds = [rnd.random() * scale for scale in (1e-6, 1e-3, 1.0, 60.0, 1e4, 1e8) for _ in range(3000)]
    for _ in range(3000):
        tie = rnd.randrange(10**9) / 1000 + 0.0005  # ms halfway between two values of 3 decimals
        seconds += [tie / 1000, math.nextafter(tie, 0) / 1000, math.nextafter(tie, math.inf) / 1000]
    seconds += [0.0, 0.0000005, 0.0000015, 0.0025, 1e9 - 1e-6, 1e9, 1e12, 5, 0, math.nan, math.inf]
    out = io.StringIO()
    setup_logging("INFO", "text", out)
    sink = finish_sink()
    assert sink is not None
    for s in seconds:
        assert sink(logging.INFO, job, "succeeded", s)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(seconds)
    for s, line in zip(seconds, lines, strict=True):
        ms = s * 1000
        assert line.endswith(f" ({ms:.1f} ms) event=job_finish job_id=1 kind=k queue=q attempt=1 outcome=succeeded "
                             f"duration_ms={round(ms, 3)!r}"), (s, line)


def test_the_direct_finish_line_names_each_attempt() -> None:
    """The sink keeps a line's constant parts per attempt too: jobs of one kind, queue and outcome at
    different attempts each name their own."""
    from pgq.models import Job, JobStatus
    from pgq.worker.outcome import finish_sink

    now = dt.datetime.now(dt.UTC)
    out = io.StringIO()
    setup_logging("INFO", "text", out)
    sink = finish_sink()
    assert sink is not None
    cases = [(1, 3), (2, 3), (1, 5), (1, 3)]
    for i, (attempts, most) in enumerate(cases):
        job = Job(id=i, queue="q", kind="k", payload={}, priority=0, status=JobStatus.RUNNING, run_at=now,
                  attempts=attempts, max_attempts=most, dedupe_key=None, lease_token=None, lease_expires_at=now,
                  claimed_by="w", last_error=None, result=None, input_watermark=None, done_watermark=None,
                  created_at=now, started_at=now, finished_at=None)
        assert sink(logging.INFO, job, "succeeded", 0.001)
    for i, (line, (attempts, most)) in enumerate(zip(out.getvalue().splitlines(), cases, strict=True)):
        assert f"job {i} k attempt {attempts}/{most}: succeeded " in line
        assert f" job_id={i} kind=k queue=q attempt={attempts} outcome=succeeded " in line
