"""pgq's dashboard in a Django project's URLs, behind Django's staff login.

    # urls.py
    from django.urls import include, path
    from pgq.contrib.django import dashboard

    urlpatterns = [..., path("pgq/", include(dashboard.urls()))]

Every page then needs a logged-in staff user (`staff_member_required`: others are sent to the admin's
login page) who passes `view_permission`, and every action (cancel, retry, pause, resume, bulk) a
user who passes `action_permission` as well; others see the pages read-only (an action answers 403).
By default any staff user may look and only superusers may act. Each action is recorded under the
Django user, as ``django:<username>`` (pgq.job_audit.actor for cancel, retry and bulk actions,
pgq.control_audit.actor for pause, resume and limit changes, and the ``pgq.web`` log). The dashboard
(`pgq.web.create_app`, an ASGI app) runs on an event loop thread of its own in the Django process,
and each request is handed to it whole; its pages and links follow the mount path. Its forms carry
their own CSRF tokens (Django's CSRF middleware leaves these URLs alone), and a form's Origin
must be the site as Django sees it (`request.scheme` and `request.get_host()`, so proxy settings
such as USE_X_FORWARDED_HOST apply). Its database role decides what it may do, as with
`pgq dashboard`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt
from starlette.types import ASGIApp, Message, Scope

from ...web import create_app
from ...web.dashboard import ACCESS_SCOPE_KEY, Access
from ._common import pgq_backend_of

__all__ = ["REQUEST_TIMEOUT_S", "Rule", "can_act", "can_view", "urls"]

Rule = str | Callable[[HttpRequest], bool]
"""Who may do something: a permission ("app_label.codename", checked with `user.has_perm`, which
superusers always pass) or a callable given the request that answers True or False."""

# What a query string may hold as it is; anything else (a raw "€", a space) is percent-encoded as
# UTF-8 before the dashboard parses it.
_QUERY_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))


def can_view(request: HttpRequest) -> bool:
    """The default `view_permission`: an active staff user (whom staff_member_required let in)."""
    return bool(request.user.is_active and request.user.is_staff)


def can_act(request: HttpRequest) -> bool:
    """The default `action_permission`: an active superuser."""
    return bool(request.user.is_active and request.user.is_superuser)


def _passes(request: HttpRequest, rule: Rule) -> bool:
    if isinstance(rule, str):
        return bool(request.user.is_active and request.user.has_perm(rule))
    return bool(rule(request))

REQUEST_TIMEOUT_S = 60.0
"""The longest a dashboard request may take before the Django view gives up (504)."""


def urls(backend: str = "default", *, view_permission: Rule = can_view, action_permission: Rule = can_act,
         **options: Any) -> list[URLPattern]:
    """URL patterns serving the dashboard, to `include` under a prefix of your choice (see the module
    docstring). `backend`: the alias in settings.TASKS whose database the dashboard shows (its DSN);
    `view_permission`: who of the staff may see it (others get 403; default: any active staff
    user); `action_permission`: who may also act (default: active superusers), both a `Rule`;
    `options`: keywords of `pgq.web.create_app` (`read_only`: nobody acts; `title`, `refresh_s`,
    `app`, `csrf_secret`, ...). Nothing connects until the first request."""
    bridge = _Bridge(lambda: create_app(pgq_backend_of(backend).dsn, trust_network=True, **options))

    def serve(request: HttpRequest, path: str) -> HttpResponse:
        if not _passes(request, view_permission):
            return HttpResponseForbidden("you may not see the pgq dashboard", content_type="text/plain")
        access = Access(read_only=not _passes(request, action_permission),
                        actor=f"django:{request.user.get_username()}",
                        refusal="your Django user may not change jobs or queues here")
        return bridge.view(request, path, access)

    view: Callable[..., HttpResponse] = csrf_exempt(staff_member_required(serve))
    return [re_path(r"^(?P<path>.*)$", view, name="pgq-dashboard")]


class _Bridge:
    """Hands Django requests to the dashboard's ASGI app, built on first use, on a loop thread of its
    own (the dashboard's connection pool belongs to that loop)."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: ASGIApp | None = None

    def _started(self) -> tuple[asyncio.AbstractEventLoop, ASGIApp]:
        with self._lock:
            if self._loop is None or self._app is None:
                self._app = self._build()
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="pgq-dashboard", daemon=True).start()
                self._loop = loop
            return self._loop, self._app

    def view(self, request: HttpRequest, path: str, access: Access) -> HttpResponse:
        """Serve `request` (whose path ends in `path`, the part below the mount point) with what
        `access` allows."""
        loop, app = self._started()
        full = request.path
        root = full[: len(full) - len(path)].rstrip("/")
        # Host as Django sees it (validated against ALLOWED_HOSTS, X-Forwarded-Host where the settings
        # trust it), with request.scheme: the origin the dashboard's CSRF check compares a form's Origin
        # with, as Django's own check does.
        host = request.get_host()
        scope: Scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
            "scheme": request.scheme, "path": full, "raw_path": full.encode(), "root_path": root,
            "query_string": quote(request.META.get("QUERY_STRING", ""), safe=_QUERY_SAFE).encode("ascii"),
            "headers": [(b"host", host.encode("latin-1")),
                        *((name.lower().encode("latin-1"), value.encode("latin-1"))
                          for name, value in request.headers.items() if name.lower() != "host")],
            "client": (request.META.get("REMOTE_ADDR", ""), 0),
            "server": (host.rsplit(":", 1)[0], int(request.get_port())),
            ACCESS_SCOPE_KEY: access,
        }
        future = asyncio.run_coroutine_threadsafe(_call(app, scope, request.body), loop)
        try:
            status, headers, body = future.result(timeout=REQUEST_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            return HttpResponse("the pgq dashboard did not answer in time", status=504)
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name.lower() == "set-cookie":
                # Django keeps cookies apart from the headers (one header per name would keep only
                # the last cookie, and its test client reads only response.cookies).
                response.cookies.load(value)
            elif name.lower() != "content-length":
                response[name] = value
        return response


async def _call(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run one request through `app`; return the status, headers and whole body of its response."""
    sent = False
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # the app waits for a disconnect only after the response
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    return int(start.get("status", 500)), headers, b"".join(chunks)
