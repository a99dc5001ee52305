"""The dashboard's defences: escaping of hostile job data, the security headers, HTTP Basic auth,
read-only mode, a database role without admin rights, CSRF on forms and the API's POST rule, and all
of it when the dashboard is mounted under a path of another app."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from pgq import Queue
from pgq.web import create_app
from pgq.web.security import Csrf
from tests.conftest import SQL, enqueue_after

from .conftest import Client, Roles, basic, csrf_token

JSON = {"Content-Type": "application/json"}
HOSTILE = "<script>alert('pgq')</script>"
PAGES = ["/", "/jobs", "/workers", "/schedules", "/limits"]


def hostile_jobs(queue: Queue) -> int:
    """Jobs whose every text field a user controls holds markup; returns the failed one's id."""
    first = queue.enqueue(HOSTILE, {"html": "</pre>" + HOSTILE, HOSTILE: [1, "<b>"]},
                          queue="<img src=x onerror=alert(1)>", dedupe_key="\"'><script>alert(2)</script>")
    (claim,) = queue.claim(worker="<svg onload=alert(3)>", queues=["<img src=x onerror=alert(1)>"])
    queue.fail(claim, "Traceback: " + HOSTILE + "\n<iframe src=javascript:alert(4)>", final=True)
    queue.enqueue(HOSTILE, queue="<img src=x onerror=alert(1)>")
    queue.claim(worker="<svg onload=alert(3)>", queues=["<img src=x onerror=alert(1)>"])
    return first


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, as a browser's parser would see them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def assert_inert(html: str) -> None:
    """No markup from the data made it into the page as markup: no element but the dashboard's own,
    no script but its own file, no inline style or event handler (the CSP would block them anyway)."""
    tags = Elements(html).tags
    names = {tag for tag, _ in tags}
    assert not names & {"img", "iframe", "b"}, names
    scripts = [attrs for tag, attrs in tags if tag == "script"]
    assert len(scripts) == 1 and (scripts[0].get("src") or "").split("?")[0].endswith("/static/app.js"), scripts
    assert not [tag for tag, _ in tags if tag == "svg" and _.get("onload")]
    for tag, attrs in tags:
        assert "style" not in attrs, tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
    for needle in ("<script>alert", "<img src=x", "<svg onload", "<iframe"):
        assert needle not in html, needle


def test_hostile_job_data_is_escaped_on_every_page(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = hostile_jobs(pgq_queue)
    client = dashboard()
    for path in [*PAGES, f"/jobs/{job_id}", f"/jobs/{job_id + 1}", "/jobs?status=failed",
                 "/jobs?q=%3Cscript%3E", "/jobs?queue=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert_inert(response.text)
    job_page = client.get(f"/jobs/{job_id}").text
    assert "&lt;script&gt;alert(" in job_page and "&lt;/pre&gt;" in job_page
    listed = client.get("/jobs?status=failed").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in listed and "&lt;script&gt;" in listed


def test_hostile_kinds_are_escaped_in_parents_children_and_waiting_counts(dashboard: Client, pgq_queue: Queue,
                                                                         db: SQL) -> None:
    parent = pgq_queue.enqueue(HOSTILE, queue="<img src=x onerror=alert(1)>")
    child = enqueue_after(db, "<img src=x onerror=alert(5)>", [parent], queue="<img src=x onerror=alert(1)>")
    grandchild = enqueue_after(db, HOSTILE, [child], queue="<iframe src=javascript:alert(6)>", run=True)
    client = dashboard()
    for path in ["/", f"/jobs/{parent}", f"/jobs/{child}", f"/jobs/{grandchild}", "/jobs?status=waiting"]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert_inert(response.text)
    page = client.get(f"/jobs/{child}").text
    assert page.count("&lt;script&gt;alert(&#39;pgq&#39;)&lt;/script&gt;") >= 2  # the parent's and the child's
    assert 'data-queue="&lt;iframe src=javascript:alert(6)&gt;"' in client.get("/").text


def test_hostile_input_in_urls_is_escaped_on_error_pages(dashboard: Client) -> None:
    client = dashboard()
    for path in ["/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "/jobs?status=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
                 "/nope%3Cscript%3E", "/?done=pause&queue=%3Cscript%3Ealert(1)%3C%2Fscript%3E"]:
        response = client.get(path)
        assert_inert(response.text)


def test_every_response_carries_the_security_headers(dashboard: Client) -> None:
    client = dashboard(auth="u:p")
    for response in (client.get("/", headers=basic("u", "p")), client.get("/api/queues", headers=basic("u", "p")),
                     client.get("/static/app.css"), client.get("/nope", headers=basic("u", "p")), client.get("/")):
        headers = response.headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert "default-src 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["server-timing"].startswith("app;dur=")
    assert client.get("/api/queues", headers=basic("u", "p")).headers["cache-control"] == "no-store"
    assert client.get("/static/app.css").headers.get("cache-control") != "no-store"


@pytest.mark.parametrize("path", ["/", "/jobs", "/jobs/1", "/workers", "/schedules", "/limits", "/api/queues",
                                  "/api/jobs", "/api/jobs/1", "/api/workers", "/api/limits", "/nope"])
def test_with_auth_every_route_but_static_files_needs_the_credentials(dashboard: Client, path: str) -> None:
    client = dashboard(auth="admin:s3cret:with:colons")
    for headers in ({}, basic("admin", "wrong"), basic("Admin", "s3cret:with:colons"), basic("admin", "s3cret"),
                    {"Authorization": "Basic !!!not-base64"}, {"Authorization": "Bearer s3cret"},
                    {"Authorization": "Basic " + "YWRtaW4="}):  # "admin", no colon
        response = client.get(path, headers=headers)
        assert response.status_code == 401, (path, headers)
        assert response.headers["www-authenticate"].startswith('Basic realm="pgq dashboard"')
        assert "needs a user name and password" in response.text
        if path.startswith("/api/"):
            assert response.json() == {"error": "this pgq dashboard needs a user name and password"}
    assert client.get(path, headers=basic("admin", "s3cret:with:colons")).status_code in (200, 404)


def test_with_auth_actions_need_the_credentials_too(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard(auth=("ops", "pw"))
    assert client.post(f"/api/jobs/{job_id}/cancel", headers=JSON).status_code == 401
    assert client.post("/api/queues/default/pause", headers=JSON).status_code == 401
    assert client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": "x"}).status_code == 401
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "queued"}]
    assert db("SELECT count(*) AS n FROM pgq.paused_queues") == [{"n": 0}]
    ok = client.post(f"/api/jobs/{job_id}/cancel", headers={**JSON, **basic("ops", "pw")})
    assert ok.status_code == 200


def test_static_files_need_no_credentials(dashboard: Client) -> None:
    client = dashboard(auth="u:p")
    for name in ("app.css", "app.js", "favicon.svg"):
        assert client.get(f"/static/{name}").status_code == 200
    assert client.get("/static/../app.py").status_code in (401, 404)  # no way out of the static folder


def test_read_only_serves_everything_and_refuses_every_action(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    failed = pgq_queue.enqueue("k")
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom", final=True)
    queued = pgq_queue.enqueue("k")
    client = dashboard(read_only=True)

    for path in [*PAGES, f"/jobs/{failed}", f"/jobs/{queued}", "/api/queues", "/api/jobs", f"/api/jobs/{queued}"]:
        assert client.get(path).status_code == 200, path
    for path in [f"/api/jobs/{queued}/cancel", f"/api/jobs/{failed}/retry", "/api/queues/default/pause",
                 "/api/queues/default/resume"]:
        response = client.post(path, headers=JSON)
        assert response.status_code == 403 and "read-only" in response.json()["error"], path
    for path in [f"/jobs/{queued}/cancel", f"/jobs/{failed}/retry", "/queues/default/pause"]:
        assert client.post(path, data={"csrf_token": "whatever"}).status_code == 403
    assert "read-only" in client.get("/").text
    for page in (client.get(f"/jobs/{queued}").text, client.get(f"/jobs/{failed}").text, client.get("/").text):
        assert "<form method=\"post\"" not in page
    assert db("SELECT status::text FROM pgq.jobs ORDER BY id") == [{"status": "failed"}, {"status": "queued"}]
    assert db("SELECT count(*) AS n FROM pgq.paused_queues") == [{"n": 0}]


@pytest.mark.parametrize("who", ["worker", "producer"])
def test_a_role_without_admin_rights_sees_no_buttons_and_gets_403_with_the_reason(
        dashboard: Client, roles: Roles, who: str) -> None:
    with Queue(roles.dsn) as admin_queue:
        queued = admin_queue.enqueue("k", queue="mail")
        cancelled = admin_queue.enqueue("k", queue="mail")
        admin_queue.cancel(cancelled)
    client = dashboard(getattr(roles, who), csrf_secret="k")

    assert client.get("/").status_code == 200
    assert "/pause\"" not in client.get("/").text and "Pause" not in client.get("/").text
    page = client.get(f"/jobs/{queued}").text
    assert "Cancel job" not in page and "admin role" in page
    for path in (f"/api/jobs/{queued}/cancel", f"/api/jobs/{cancelled}/retry", "/api/queues/mail/pause",
                 "/api/queues/mail/resume"):
        response = client.post(path, headers=JSON)
        assert response.status_code == 403, path
        error = response.json()["error"]
        assert "may not" in error and "pgq's admin role" in error and "see `pgq roles`" in error
    token = Csrf(b"k").token(client.cookies["pgq_csrf"])  # no page has a form to take it from
    form = client.post(f"/jobs/{queued}/cancel", data={"csrf_token": token})
    assert form.status_code == 403 and "may not cancel" in form.text
    with Queue(roles.dsn) as admin_queue:
        assert admin_queue.get(queued).status.value == "queued"  # type: ignore[union-attr]
        assert admin_queue.stats()[0]["paused"] is False


def test_the_admin_role_may_do_everything(dashboard: Client, roles: Roles) -> None:
    with Queue(roles.dsn) as setup:
        job_id = setup.enqueue("k", queue="mail")
    client = dashboard(roles.admin)
    assert "Pause" in client.get("/").text and "Cancel job" in client.get(f"/jobs/{job_id}").text
    assert client.post(f"/api/jobs/{job_id}/cancel", headers=JSON).json()["job"]["status"] == "cancelled"
    assert client.post("/api/queues/mail/pause", headers=JSON).json()["changed"] is True


def test_a_privilege_the_database_refuses_is_a_403_with_its_message(dashboard: Client, roles: Roles,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Should the rights check pass and the database still refuse (a grant revoked meanwhile), the
    # database's own message comes through, as a 403.
    from pgq.web import queries

    with Queue(roles.dsn) as setup:
        job_id = setup.enqueue("k")
    monkeypatch.setattr(queries.Rights, "refusal", lambda self, action: None)
    response = dashboard(roles.worker).post(f"/api/jobs/{job_id}/cancel", headers=JSON)
    # A worker has no UPDATE on pgq.jobs (revision 0011's functions write for it): PostgreSQL's own
    # refusal is the message.
    assert response.status_code == 403 and "permission denied for table jobs" in response.json()["error"]


def test_a_form_action_needs_the_csrf_token_of_its_cookie(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard()
    token = csrf_token(client, f"/jobs/{job_id}")
    path = f"/jobs/{job_id}/cancel"

    assert client.post(path).status_code == 403  # no form at all
    assert client.post(path, data={}).status_code == 403  # no token
    assert client.post(path, data={"csrf_token": "x" + token[1:]}).status_code == 403  # wrong token
    assert client.post(path, data={"csrf_token": token}, headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.post(path, data={"csrf_token": token}, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    other = dashboard()  # another browser: its own cookie, so this token is not its
    other.get("/")
    assert other.post(path, data={"csrf_token": token}).status_code == 403
    cookieless = dashboard()
    refused = cookieless.post(path, data={"csrf_token": token})
    assert refused.status_code == 403 and "cookie" in refused.text
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "queued"}]

    done = client.post(path, data={"csrf_token": token}, headers={"Origin": "http://testserver"},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job_id}?done=cancel"
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "cancelled"}]
    assert "Job cancelled" in client.get(done.headers["location"]).text


def test_tokens_of_another_dashboard_secret_are_refused(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    first = dashboard(csrf_secret="one")
    token = csrf_token(first, f"/jobs/{job_id}")
    second = dashboard(csrf_secret="two")
    second.cookies.update(first.cookies)
    assert second.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}).status_code == 403
    shared = dashboard(csrf_secret="one")
    shared.cookies.update(first.cookies)
    assert shared.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}, follow_redirects=False).status_code == 303


def test_the_csrf_cookie_is_http_only_and_same_site_strict(dashboard: Client) -> None:
    cookie = dashboard().get("/").headers["set-cookie"]
    assert cookie.startswith("pgq_csrf=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/" in cookie


def test_api_actions_need_a_json_content_type_and_the_same_origin(dashboard: Client, pgq_queue: Queue,
                                                                  db: SQL) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard()
    path = f"/api/jobs/{job_id}/cancel"
    for headers in ({}, {"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"},
                    {"Content-Type": "multipart/form-data; boundary=x"},
                    {**JSON, "Origin": "http://evil.example"}, {**JSON, "Origin": "null"},
                    {**JSON, "Sec-Fetch-Site": "same-site"}):
        response = client.post(path, headers=headers)
        assert response.status_code == 403, headers
        assert response.json()["error"]
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "queued"}]
    ok = client.post(path, headers={**JSON, "Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200
    assert client.post(f"/api/jobs/{job_id}/retry", headers={"Content-Type": "application/json; charset=utf-8"},
                       content=b"{}").status_code == 200


def test_mounted_under_a_path_links_and_rules_follow_the_mount(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="mail")
    host = Starlette(routes=[Mount("/ops/pgq", app=create_app(pgq_dsn, auth="u:p"))])
    with TestClient(host) as client:
        auth = basic("u", "p")
        assert client.get("/ops/pgq/").status_code == 401
        page = client.get("/ops/pgq/", headers=auth)
        assert page.status_code == 200
        assert 'href="/ops/pgq/static/app.css' in page.text and 'href="/ops/pgq/jobs"' in page.text
        assert 'action="/ops/pgq/queues/pause"' in page.text and 'name="queue" value="mail"' in page.text
        assert "Path=/ops/pgq" in page.headers["set-cookie"]
        assert client.get("/ops/pgq/static/app.js").status_code == 200
        assert client.get(f"/ops/pgq/api/jobs/{job_id}", headers=auth).json()["job"]["id"] == job_id
        assert client.get("/ops/pgq/api/nope", headers=auth).json()["error"]
        page = client.get(f"/ops/pgq/jobs/{job_id}", headers=auth).text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        done = client.post(f"/ops/pgq/jobs/{job_id}/cancel", data={"csrf_token": token}, headers=auth,
                           follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == f"/ops/pgq/jobs/{job_id}?done=cancel"
        paused = client.post("/ops/pgq/queues/pause", data={"csrf_token": token, "queue": "mail"}, headers=auth,
                             follow_redirects=False)
        assert paused.headers["location"] == "/ops/pgq/?done=pause"
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "cancelled"}]
    assert db("SELECT queue FROM pgq.paused_queues") == [{"queue": "mail"}]


def test_allowed_hosts_refuse_other_host_names(dashboard: Client) -> None:
    # DNS rebinding: a page of evil.example re-points its name at 127.0.0.1; its requests then carry
    # Host: evil.example, and are refused, static files and API alike.
    local = dashboard(allowed_hosts=["127.0.0.1", "localhost", "::1"], client_options={"base_url": "http://localhost:8787"})
    assert local.get("/").status_code == 200
    for host in ("127.0.0.1:8787", "LOCALHOST", "[::1]:8787"):
        assert local.get("/api/queues", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example:8787", "evil.example", "127.0.0.1.evil.example", "", "[::2]:8787"):
        for path in ("/", "/api/queues", "/static/app.css"):
            response = local.get(path, headers={"Host": host})
            assert response.status_code == 400 and "answers to 127.0.0.1, ::1, localhost only" in response.text
            assert response.headers["content-security-policy"]


def test_a_static_path_that_climbs_out_reaches_no_page(pgq_dsn: str) -> None:
    # Sent as is (a client would normalise "..") to an app that needs credentials.
    import asyncio

    async def raw(path: str) -> tuple[int, bytes]:
        app = create_app(pgq_dsn, auth="u:p")
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
                 "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
        await app(scope, receive, send)  # type: ignore[arg-type]
        await app.state.dashboard.close()
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")  # type: ignore[misc]
        return int(start["status"]), body  # type: ignore[call-overload]

    for path in ("/static/../api/queues", "/static/%2e%2e/api/queues", "/static/../../etc/passwd"):
        status, body = asyncio.run(raw(path))
        assert status == 404 and b"queues" not in body, (path, status)
