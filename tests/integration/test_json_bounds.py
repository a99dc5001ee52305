"""Bounded JSON (revision 0019) through the Python client: a value nested past the bound is an
InvalidJob before anything is sent, exactly where the database draws the line, and the database's
own refusal reaches the client as InvalidJob too."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import pgq
from pgq.bounds import MAX_JSON_DEPTH, check_depth
from pgq.errors import InvalidJob

from .conftest import SQL


def nested(levels: int, inner: Any = 1) -> Any:
    """`inner` at `levels` levels below the top (alternating lists and objects)."""
    value = inner
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def level(value: Any) -> int:
    """The deepest level holding a value (the top is level 0)."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return max((1 + level(c) for c in children), default=0)


def test_the_client_refuses_a_payload_nested_past_the_bound_before_sending(pgq_dsn: str, db: SQL) -> None:
    with pgq.Queue(pgq_dsn) as queue:
        queue.enqueue("k", nested(MAX_JSON_DEPTH))
        for payload in (nested(MAX_JSON_DEPTH + 1), nested(3000), nested(MAX_JSON_DEPTH + 1, "a]\"[{")):
            with pytest.raises(InvalidJob, match="nests"):
                queue.enqueue("k", payload)
        with pytest.raises(InvalidJob, match="nests deeper"):
            queue.enqueue_many([pgq.JobSpec("k", {"ok": 1}), pgq.JobSpec("k", nested(MAX_JSON_DEPTH + 1))])
    assert [r["n"] for r in db("SELECT count(*) AS n FROM pgq.jobs")] == [1]


def test_the_database_refusal_is_an_invalid_job(pgq_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import pgq.models
    monkeypatch.setattr(pgq.bounds, "check_depth", lambda what, text: None)  # a client without the check
    with pgq.Queue(pgq_dsn) as queue, pytest.raises(InvalidJob, match="nests deeper than 64 levels"):
        queue.enqueue("k", nested(MAX_JSON_DEPTH + 1))


def test_the_client_and_the_database_draw_the_same_line(db: SQL) -> None:
    rng = random.Random(46)

    def shape(depth: int) -> Any:
        if depth <= 0 or rng.random() < 0.03:
            return rng.choice([1, "a\\\"]b", None, [], {}, "{[", 2.5, True])
        width = rng.choice([0, 1, 1, 1, 2])
        if rng.random() < 0.5:
            return [shape(depth - 1) for _ in range(width)]
        return {f"k{i}]\\\"": shape(depth - 1) for i in range(width)}

    for _ in range(300):
        value = shape(rng.randint(MAX_JSON_DEPTH - 4, MAX_JSON_DEPTH + 4))
        text = json.dumps(value, separators=(",", ":"))
        try:
            check_depth("payload", text)
            client = True
        except InvalidJob:
            client = False
        [row] = db("SELECT pgq.json_bounded(%s::jsonb) AS ok", [text])
        assert client == row["ok"] == (level(value) <= MAX_JSON_DEPTH), text
