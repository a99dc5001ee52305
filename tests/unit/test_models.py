"""Validation of job specs and helpers (no database)."""

from __future__ import annotations

import datetime as dt

import pytest

from pgq import InvalidJob, JobSpec, JobStatus
from pgq.models import encode_json, positive_seconds


def test_jobspec_serializes_payload_once() -> None:
    spec = JobSpec("k", {"b": [1, 2], "a": "é"})
    assert spec.payload_json == '{"b":[1,2],"a":"\\u00e9"}'
    assert JobSpec("k").payload_json == "{}"


def test_escaped_backslash_u0000_text_is_not_a_nul() -> None:
    assert encode_json("p", {"x": "\\u0000"}, {}) == '{"x":"\\\\u0000"}'
    with pytest.raises(InvalidJob):
        encode_json("p", {"x": "\x00"}, {})


def test_delay_accepts_timedelta_and_seconds() -> None:
    assert JobSpec("k", delay=dt.timedelta(minutes=1)).delay_s == 60.0
    assert JobSpec("k", delay=2.5).delay_s == 2.5
    with pytest.raises(InvalidJob):
        JobSpec("k", delay="soon")  # type: ignore[arg-type]


def test_positive_seconds() -> None:
    assert positive_seconds("lease", dt.timedelta(seconds=3)) == 3.0
    for bad in (0, -1, dt.timedelta(0)):
        with pytest.raises(InvalidJob, match="lease must be positive"):
            positive_seconds("lease", bad)


def test_status_parse_lists_valid_values() -> None:
    assert JobStatus.parse("failed") is JobStatus.FAILED
    with pytest.raises(InvalidJob, match="queued, running, succeeded, failed, cancelled"):
        JobStatus.parse("finished")


def test_bool_is_not_an_int_for_priority_or_watermark() -> None:
    with pytest.raises(InvalidJob):
        JobSpec("k", priority=True)
    with pytest.raises(InvalidJob):
        JobSpec("k", watermark=False)


def test_payload_encoding_matches_json_dumps_and_rejects_what_jsonb_cannot_hold() -> None:
    import json

    value = {"a": [1, 2.5, "é\n\"", None, True, {"b": -3}], 7: "int key", "t": ()}
    assert encode_json("payload", value, {}) == json.dumps(value, separators=(",", ":"), allow_nan=False)
    for bad, why in (({"x": float("nan")}, "Out of range float"), ({"x": object()}, "object"),
                     ({"x": {1, 2}}, "set")):
        with pytest.raises(InvalidJob, match=why):
            JobSpec("k", bad)
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(InvalidJob, match="contains itself"):
        JobSpec("k", {"loop": looped})


def test_jobspec_init_is_the_one_dataclass_would_write() -> None:
    # JobSpec writes its __init__ by hand (to fill slots directly): same parameters, order and
    # defaults as its init fields, every field set, and the same validation.
    import dataclasses
    import inspect

    params = list(inspect.signature(JobSpec).parameters.values())
    init_fields = [f for f in dataclasses.fields(JobSpec) if f.init]
    assert [p.name for p in params] == [f.name for f in init_fields]
    assert [p.default for p in params] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in init_fields
    ]
    spec = JobSpec("k", {"a": 1}, "q", 5, None, 2.0, "key", 7, 3)
    assert dataclasses.astuple(spec) == ("k", {"a": 1}, "q", 5, None, 2.0, "key", 7, 3, None, "cancel", None,
                                         None, "hold", None, None, None, '{"a":1}')
    # The uniqueness variants (the last init fields) land in their own slots too.
    unique = JobSpec("k", None, "q", 0, None, None, "key", None, None, None, "cancel", None, None, "hold", 60.0)
    assert (unique.unique_for, unique.on_conflict, unique.debounce) == (60.0, None, None)
    debounced = JobSpec("k", dedupe_key="key", on_conflict="replace", debounce=5)
    assert (debounced.unique_for, debounced.on_conflict, debounced.debounce) == (None, "replace", 5)
    after = JobSpec("k", None, "q", 0, None, None, None, None, None, [3, 2, 3], "run")
    assert (after.depends_on, after.on_parent_failure) == ((3, 2), "run")
    assert dataclasses.replace(spec, priority=6).priority == 6
    assert spec == JobSpec(kind="k", payload={"a": 1}, queue="q", priority=5, delay=2.0, dedupe_key="key",
                           watermark=7, max_attempts=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.kind = "other"  # type: ignore[misc]
    with pytest.raises(InvalidJob, match="give run_at or delay"):
        JobSpec("k", run_at=dt.datetime.now(dt.UTC), delay=1.0)


def test_job_from_tuple_and_claims_from_tuples_fill_every_field_in_table_order() -> None:
    # Both fill slots by hand, one named setter per field: each column must land in its own field.
    import dataclasses

    from pgq.models import Job, claims_from_tuples

    at = [dt.datetime(2026, 1, 1, second=s, tzinfo=dt.UTC) for s in range(5)]
    names = [f.name for f in dataclasses.fields(Job)]
    row = (7, "q", "k", {"a": [1]}, -3, "running", at[0], 2, 5, "key", "tok", at[1], "w-1", "boom", {"r": 1},
           11, 9, at[2], at[3], at[4], {"step": 3}, "acct:1", "seq:1")
    expected = dict(zip(names, row, strict=True), status=JobStatus.RUNNING)
    job = Job.from_tuple(row)
    assert dataclasses.asdict(job) == expected
    assert job.status is JobStatus.RUNNING
    assert job == Job(**expected)
    lease = dt.timedelta(seconds=30)
    [claim, unleased] = claims_from_tuples([row, (*row[:10], None, *row[11:])], lease)
    assert (claim.job, claim.token, claim.lease) == (job, "tok", lease)
    assert unleased.token == ""
    for bad in (row[:-1], (*row, None)):
        with pytest.raises(ValueError):
            Job.from_tuple(bad)


def test_the_job_context_tracks_progress_versions_and_cancellation() -> None:
    from pgq.context import JobContext
    from pgq.models import Claim, Job

    job = Job(1, "q", "k", None, 0, JobStatus.RUNNING, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 1, 3, None, "t",
              None, "w", None, None, None, None, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None, None)
    claim = Claim(job, "t", dt.timedelta(seconds=5))
    context = JobContext(claim, 12.5)
    assert (context.claim, context.claimed_at, context.cancelled) == (claim, 12.5, False)
    assert context.unsent_progress() is None
    context.progress = (1, '{"a": 1}')
    assert context.unsent_progress() == '{"a": 1}'
    assert context.unsent_progress() is None  # sent once
    context.progress = (2, '{"a": 2}')
    context.progress = (3, '{"a": 3}')
    assert context.unsent_progress() == '{"a": 3}'  # only the latest


def test_jobspec_checks_dependencies() -> None:
    assert JobSpec("k", depends_on=[]).depends_on is None  # no parents: a plain job
    assert JobSpec("k", depends_on=(5, 5, 4)).depends_on == (5, 4)
    for bad, why in (("12", "list of job ids"), (7, "list of job ids"), ([0], "int >= 1"), ([True], "int >= 1"),
                     ([1.0], "int >= 1"), ([[1]], "job ids")):
        with pytest.raises(InvalidJob, match=why):
            JobSpec("k", depends_on=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="on_parent_failure must be 'cancel' or 'run'"):
        JobSpec("k", depends_on=[1], on_parent_failure="ignore")
    for option in ({"dedupe_key": "x"}, {"dedupe_key": "x", "watermark": 1}):
        with pytest.raises(InvalidJob, match="cannot be combined with dedupe_key or watermark"):
            JobSpec("k", depends_on=[1], **option)  # type: ignore[arg-type]
