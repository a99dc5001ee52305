"""Text Postgres cannot store (issue 40, finding 8): a lone surrogate (`{"a": "\\ud800"}`, or bytes
that are not UTF-8 decoded with surrogateescape, as a command line's arguments are) gave an HTTP 500
on /api/jobs, /jobs and /jobs/bulk, a raw UnicodeEncodeError or InvalidTextRepresentation in the
client and a traceback in `pgq jobs cancel --error`. Now: 400, InvalidJob, exit 2 with one line."""

from __future__ import annotations

import pytest

from pgq import InvalidJob, JobSpec, Queue
from pgq.cli import main
from tests.conftest import SQL

from .conftest import Client, csrf_token

LONE = "\ud800"


def test_the_dashboard_answers_400(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue("k", {"a": 1})
    client = dashboard()
    for params in ({"payload": '{"a": "\\ud800"}'}, {"payload": '{"a": "\\udfff x"}'}):
        assert client.get("/api/jobs", params=params).status_code == 400
        assert client.get("/jobs", params=params).status_code == 400
        assert client.get("/jobs/bulk", params={"action": "cancel", **params}).status_code == 400
        token = csrf_token(client, "/jobs")
        done = client.post("/jobs/bulk", data={"csrf_token": token, "action": "cancel", "all": "1", **params})
        assert done.status_code == 400
    # A proper pair (an emoji, escaped) is fine.
    assert client.get("/api/jobs", params={"payload": '{"a": "\\ud83d\\ude00"}'}).status_code == 200


@pytest.mark.parametrize("spec", [
    {"kind": LONE}, {"kind": "k", "queue": "q" + LONE}, {"kind": "k", "payload": {"a": LONE}},
    {"kind": "k", "payload": {LONE: 1}}, {"kind": "k", "dedupe_key": LONE}, {"kind": "k", "group_key": LONE},
], ids=repr)
def test_the_client_raises_invalid_job_before_sending(pgq_queue: Queue, db: SQL, spec: dict[str, object]) -> None:
    with pytest.raises(InvalidJob, match="lone surrogate"):
        pgq_queue.enqueue(**spec)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="lone surrogate"):
        JobSpec(**spec)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob):
        pgq_queue.cancel_where(error=LONE)
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]
    # A character outside the BMP is no surrogate: stored and read back as it is.
    job_id = pgq_queue.enqueue("k", {"a": "\U0001f600"})
    assert pgq_queue.get(job_id).payload == {"a": "\U0001f600"}


def test_an_error_text_with_a_lone_surrogate_is_stored_escaped(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k", max_attempts=1)
    [claim] = pgq_queue.claim(worker="w")
    failed = pgq_queue.fail(claim, "cannot open /tmp/\udcff.txt")
    assert failed.last_error == "cannot open /tmp/\\udcff.txt" and failed.id == job_id


def test_the_cli_exits_2_with_one_line(pgq_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "cancel", "--error", "\udcff", "--dsn", pgq_dsn]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "UTF-8" in err
