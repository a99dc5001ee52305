"""A job stored past revision 0019's bounds (written before it) on the dashboard: its page and the
API answer, saying what cannot be shown, instead of a 500 (issue #46)."""

from __future__ import annotations

import pytest

from tests.conftest import SQL

from .conftest import Client

# A value nested past Python's default recursion limit is what these tests feed pgq.
pytestmark = pytest.mark.usefixtures("default_recursion_limit")

DEEP = "[" * 5000 + "]" * 5000


def test_the_job_page_and_the_api_show_a_job_whose_payload_cannot_be_decoded(dashboard: Client, db: SQL) -> None:
    db("ALTER TABLE pgq.live_jobs DISABLE TRIGGER jobs_json_bounded_insert")
    try:
        [row] = db("INSERT INTO pgq.jobs (kind, payload, result) VALUES ('k', %s::jsonb, %s::jsonb) RETURNING id",
                   [DEEP, "[" * 900 + "]" * 900])
    finally:
        db("ALTER TABLE pgq.live_jobs ENABLE TRIGGER jobs_json_bounded_insert")
    client = dashboard()
    page = client.get(f"/jobs/{row['id']}")
    assert page.status_code == 200, page.text[:300]
    assert "not shown:" in page.text and "nested too deeply" in page.text
    api = client.get(f"/api/jobs/{row['id']}")
    assert api.status_code == 200, api.text[:300]
    body = api.json()["job"]
    assert body["payload"] is None and body["result"] is None and body["undecodable"] == ["payload", "result"]
    assert client.get("/jobs").status_code == 200


def test_the_templates_tojson_says_what_it_cannot_show() -> None:
    from pgq.bounds import Undecodable
    from pgq.web.views import environment

    template = environment().from_string("{{ value | tojson }}")
    assert "not shown: 7 bytes" in template.render(value=Undecodable("nested too deeply", 7))
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    assert "nested too deeply" in template.render(value=deep)
    assert template.render(value={"a": 1}) == '{"a": 1}'
