"""Whatever a client sends, the dashboard answers with a client error (or the page), never 500:
property tests over every route and parameter with huge and odd values, sent as raw ASGI requests
(an HTTP client would normalise or refuse some of them), and the findings of the hostile review
(issue 30) one by one: ids over Python's int() digit limit, forms of many fields, throttled
Basic-auth guesses, the Origin's scheme and port, queue names that are path segments, notices."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from typing import Any
from urllib.parse import quote, urljoin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pgq import PgqError, Queue
from pgq.web import create_app
from pgq.web.security import AUTH_FAILURES, AUTH_WINDOW_S, CSRF_COOKIE, BasicAuth
from tests.conftest import SQL

from .conftest import Client, basic, csrf_token

CLIENT_ERRORS = {400, 401, 403, 404, 405, 409, 413}
"""What a hostile request may get (409: an action the job's state forbids)."""
OK = {200, 303, 307}  # 307: Starlette redirecting "/jobs//" to "/jobs"
HUGE = "9" * 5000  # over Python's 4,300-digit int() limit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class Raw:
    """Sends requests to an ASGI app exactly as given (path bytes, query bytes, headers, body), as
    uvicorn would pass them on, on one event loop kept for the whole test."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()

    def __call__(self, method: str, raw_path: bytes, query: bytes = b"",
                 headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"", client: str = "127.0.0.1",
                 ) -> Answer:
        return self.loop.run_until_complete(self._send(method, raw_path, query, headers or [], body, client))

    async def _send(self, method: str, raw_path: bytes, query: bytes, headers: list[tuple[bytes, bytes]],
                    body: bytes, client: str) -> Answer:
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            # uvicorn's decoding of the path: percent-decoded, invalid UTF-8 replaced.
            "path": urllib.parse.unquote(raw_path.decode("ascii")), "raw_path": raw_path, "root_path": "",
            "query_string": query, "headers": [(b"host", b"testserver"), *headers], "client": (client, 50000),
            "server": ("testserver", 80),
        }
        sent = False
        out: dict[str, Any] = {"body": b""}

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.sleep(3600)
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = {k.decode("latin-1"): v.decode("latin-1") for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                out["body"] += message.get("body", b"")

        await self.app(scope, receive, send)
        return Answer(out["status"], out["headers"], out["body"])

    def close(self) -> None:
        dashboard = getattr(self.app.state, "dashboard", None)
        if dashboard is not None:
            self.loop.run_until_complete(dashboard.close())
        self.loop.close()


@pytest.fixture
def raw(pgq_dsn: str) -> Iterator[Raw]:
    sender = Raw(create_app(pgq_dsn, allowed_hosts=["testserver"], csrf_secret="s"))
    yield sender
    sender.close()


# -- values ------------------------------------------------------------------------------------------

def _pct(data: bytes) -> bytes:
    return "".join(f"%{b:02X}" for b in data).encode()


odd_text = st.sampled_from([
    HUGE, "-" + HUGE, "-1", "0", "00", "+1", " 1", "1 ", "1e3", "0x10", "\uff19", "\u00b2", "1_000", str(2**63),
    str(2**63 - 1), str(2**64), "\x00", "1\x00", "..", ".", "/", "?", "#", "%", "%%", "a b", "ü", "\u202e",
    "x" * 3000, "failed", "FAILED", "queued", "", " ",
])
# One value as sent on the wire: odd text percent-encoded as UTF-8, or arbitrary bytes (invalid UTF-8
# included), percent-encoded.
wire_value = st.one_of(
    odd_text.map(lambda t: quote(t, safe="").encode()),
    st.binary(max_size=40).map(_pct),
    st.text(max_size=30).map(lambda t: quote(t, safe="").encode()),
)
PARAMS = [b"status", b"queue", b"kind", b"q", b"limit", b"cursor", b"done", b"x", b"payload", b"action"]
query_string = st.lists(st.tuples(st.sampled_from(PARAMS), wire_value), max_size=12).map(
    lambda pairs: b"&".join(k + b"=" + v for k, v in pairs))
segment = st.one_of(wire_value.filter(bool), st.sampled_from([b"1", b"..", b".", b"%2e%2e", b"a%2Fb"]))

GET_PAGES = [b"/", b"/jobs", b"/jobs/bulk", b"/workers", b"/schedules", b"/limits", b"/api/queues", b"/api/jobs",
             b"/api/workers", b"/api/limits"]
JOB_GETS = [b"/jobs/%s", b"/api/jobs/%s", b"/api/jobs/%s/explain"]
POSTS = [b"/jobs/%s/cancel", b"/jobs/%s/retry", b"/queues/%s/pause", b"/queues/%s/resume",
         b"/api/jobs/%s/cancel", b"/api/jobs/%s/retry", b"/api/queues/%s/pause", b"/api/queues/%s/resume"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _ok(answer: Answer) -> None:
    assert answer.status in CLIENT_ERRORS | OK, (answer.status, answer.body[:300])


@SETTINGS
@given(path=st.sampled_from(GET_PAGES), query=query_string, method=st.sampled_from(["GET", "HEAD", "PUT", "DELETE"]))
def test_pages_and_api_reads_answer_any_query_without_500(raw: Raw, path: bytes, query: bytes, method: str) -> None:
    _ok(raw(method, path, query))


@SETTINGS
@given(template=st.sampled_from(JOB_GETS), value=segment, query=query_string)
def test_job_pages_answer_any_id_without_500(raw: Raw, template: bytes, value: bytes, query: bytes) -> None:
    _ok(raw("GET", template % value, query))


form_body = st.one_of(
    st.lists(st.tuples(st.sampled_from([b"csrf_token", b"queue", b"x", b"a%00"]), wire_value), max_size=30).map(
        lambda pairs: b"&".join(k + b"=" + v for k, v in pairs)),
    st.binary(max_size=200),
    st.just(b"x=" + b"9" * 5000),
)


@SETTINGS
@given(template=st.sampled_from(POSTS), value=segment, body=form_body, with_token=st.booleans(),
       media=st.sampled_from([b"application/x-www-form-urlencoded", b"application/json", b"text/plain", b""]))
def test_actions_answer_any_path_and_body_without_500(raw: Raw, template: bytes, value: bytes, body: bytes,
                                                      with_token: bool, media: bytes) -> None:
    cookie = "c" * 30
    headers = [(b"content-type", media), (b"cookie", f"{CSRF_COOKIE}={cookie}".encode())]
    if with_token:
        token = raw.app.state.dashboard.csrf.token(cookie)
        body = body + b"&csrf_token=" + token.encode()
    _ok(raw("POST", template % value, b"", headers, body))


def test_ids_cursors_and_limits_over_the_int_digit_limit_are_400(raw: Raw) -> None:
    for path, query in [(b"/jobs/" + HUGE.encode(), b""), (b"/api/jobs/" + HUGE.encode(), b""),
                        (b"/jobs", b"cursor=" + HUGE.encode()), (b"/api/jobs", b"cursor=" + HUGE.encode()),
                        (b"/jobs", b"limit=" + HUGE.encode()), (b"/api/jobs", b"limit=" + HUGE.encode())]:
        assert raw("GET", path, query).status == 400, (path[:20], query[:20])


def test_a_form_of_many_fields_is_a_client_error(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard()
    token = csrf_token(client, f"/jobs/{job_id}")
    fields = {f"f{i}": "x" for i in range(20)} | {"csrf_token": token}
    assert client.post(f"/jobs/{job_id}/cancel", data=fields).status_code == 400


# -- authentication -----------------------------------------------------------------------------------

async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def test_failed_auth_is_throttled_per_client_address() -> None:
    clock = [1000.0]
    app = Starlette(routes=[Route("/api/limits", _hello)],
                    middleware=[Middleware(BasicAuth, user="u", password="right", clock=lambda: clock[0])])
    sender = Raw(app)
    try:
        def get(password: str, client: str = "10.0.0.1") -> Answer:
            header = basic("u", password)["Authorization"].encode()
            return sender("GET", b"/api/limits", headers=[(b"authorization", header)], client=client)

        statuses = [get(f"guess{i}").status for i in range(12)]
        assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
        throttled = get("right")  # even the right password waits out the window
        assert throttled.status == 429 and int(throttled.headers["retry-after"]) >= 1
        assert get("guess", client="10.0.0.2").status == 401  # another address is not throttled
        assert get("right", client="10.0.0.2").status == 200
        # No credentials at all (a browser's first request) is not a guess.
        assert all(sender("GET", b"/api/limits", client="10.0.0.3").status == 401 for _ in range(15))
        clock[0] += int(throttled.headers["retry-after"])
        assert get("right").status == 200
    finally:
        sender.close()


def test_the_dashboard_throttles_wrong_passwords(dashboard: Client) -> None:
    client = dashboard(auth="u:right")
    statuses = [client.get("/api/limits", headers=basic("u", f"guess{i}")).status_code
                for i in range(AUTH_FAILURES + 1)]
    assert statuses == [401] * AUTH_FAILURES + [429]
    refused = client.get("/", headers=basic("u", "right"))
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= AUTH_WINDOW_S


# -- origin ---------------------------------------------------------------------------------------------

JSON = {"Content-Type": "application/json"}


def test_the_origin_must_match_in_scheme_host_and_port(dashboard: Client, pgq_queue: Queue) -> None:
    client = dashboard()
    job_id = pgq_queue.enqueue("k")
    for origin in ("https://testserver", "http://testserver:8080", "https://testserver:80", "ftp://testserver",
                   "http://evil.example", "null", "http://testserver.evil.example", "http://"):
        response = client.post(f"/api/jobs/{job_id}/cancel", headers={**JSON, "Origin": origin})
        assert response.status_code == 403, origin
    same = client.post(f"/api/jobs/{job_id}/cancel", headers={**JSON, "Origin": "http://TESTSERVER:80"})
    assert same.status_code == 200
    tls = dashboard(client_options={"base_url": "https://testserver:8443"})
    again = pgq_queue.enqueue("k")
    path = f"/api/jobs/{again}/cancel"
    assert tls.post(path, headers={**JSON, "Origin": "http://testserver:8443"}).status_code == 403
    assert tls.post(path, headers={**JSON, "Origin": "https://testserver:8443"}).status_code == 200


# -- URLs the UI builds ------------------------------------------------------------------------------------

HOSTILE_NAMES = ["..", ".", "/", "a/../b", "?", "#", "%", "%2e%2e", "a b", "ünïcødé", "pause", "x/pause", "&done=x"]


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_every_queue_name_gets_forms_that_post_for_that_queue(dashboard: Client, pgq_queue: Queue, db: SQL,
                                                              action: str) -> None:
    for name in HOSTILE_NAMES:
        pgq_queue.enqueue("k", queue=name)
    if action == "resume":
        for name in HOSTILE_NAMES:
            pgq_queue.pause(name)
    client = dashboard()
    page = client.get("/").text
    forms = re.findall(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', page, re.S)
    forms = [(unescape(a), body) for a, body in forms if unescape(a).split("?")[0].endswith(f"/{action}")]
    assert len(forms) == len(HOSTILE_NAMES)
    for target, body in forms:
        # As a browser would: resolve the action against the page's URL (dot segments removed).
        url = urljoin("http://testserver/", target)
        fields = {unescape(k): unescape(v) for k, v in re.findall(r'name="([^"]+)" value="([^"]*)"', body)}
        answer = client.post(url, data=fields, follow_redirects=False)
        assert answer.status_code == 303, (target, answer.status_code, answer.text[:200])
    paused = {r["queue"] for r in db("SELECT queue FROM pgq.paused_queues")}
    assert paused == (set(HOSTILE_NAMES) if action == "pause" else set())


def test_queue_links_lead_to_that_queues_page(dashboard: Client, pgq_queue: Queue) -> None:
    for name in HOSTILE_NAMES:
        pgq_queue.enqueue("k", queue=name)
    client = dashboard()
    links = [unescape(h) for h in re.findall(r'<td class="name"><a href="([^"]*/queues?[/?][^"]*)"',
                                             client.get("/").text)]
    assert len(links) == len(HOSTILE_NAMES)
    found = set()
    for link in links:
        # As a browser would: resolve against the page's URL (dot segments removed).
        answer = client.get(urljoin("http://testserver/", link))
        assert answer.status_code == 200, (link, answer.text[:200])
        found.add(unescape(re.search(r'<h1>Queue <span class="mono">(.*?)</span>', answer.text, re.S).group(1)))
    assert found == set(HOSTILE_NAMES)


# -- notices ------------------------------------------------------------------------------------------------

def test_notices_come_from_a_fixed_set(dashboard: Client) -> None:
    client = dashboard()
    page = client.get("/", params={"done": "pause", "queue": "Send your password to evil.example"}).text
    assert "evil.example" not in page and "Queue paused" in page
    assert "{queue}" not in client.get("/", params={"done": "{queue}"}).text
    assert "Send" not in client.get("/", params={"done": "resume", "queue": "Send"}).text


# -- create_app without auth ----------------------------------------------------------------------------------

def test_create_app_without_auth_needs_allowed_hosts_or_trust(pgq_dsn: str) -> None:
    with pytest.raises(PgqError, match="trust_network"):
        create_app(pgq_dsn)
    create_app(pgq_dsn, auth="u:p")
    create_app(pgq_dsn, allowed_hosts=["localhost"])
    create_app(pgq_dsn, trust_network=True)
