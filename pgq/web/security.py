"""The dashboard's defences: HTTP Basic authentication, the security headers every response carries,
and the checks every action (a POST) passes before it changes anything.

Actions come two ways, and each has its rule:

- Browser forms (`POST /jobs/{id}/cancel`, ...) carry a CSRF token: the HMAC, under the dashboard's
  secret, of a random value the browser holds in the cookie `pgq_csrf` (HttpOnly, SameSite=Strict).
  Another site can neither read the cookie nor compute the token (a "signed double submit").
- API calls (`POST /api/...`) must send `Content-Type: application/json`. A page of another site
  cannot: a form can only send form or text encodings, and a script's cross-origin request with that
  type needs a CORS preflight, which the dashboard never grants.

Both also refuse a request whose `Origin` header names another origin than its `Host`, or whose
`Sec-Fetch-Site` says it came from another site: a second line of defence, which means a reverse
proxy must pass the browser's Host header on.

A dashboard on a loopback address without a password is what DNS rebinding attacks: a page of
another site re-points its own name at 127.0.0.1, and its requests are then same-origin. `TrustedHosts`
answers only requests whose `Host` is one of the names the dashboard is served under (`pgq dashboard`
applies it in that case), which the rebound name is not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import HttpError

__all__ = [
    "AUTH_FAILURES",
    "AUTH_WINDOW_S",
    "CSP",
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "BasicAuth",
    "Csrf",
    "SecurityHeaders",
    "TrustedHosts",
    "check_api_request",
    "check_same_origin",
    "host_name",
    "parse_auth",
    "route_path",
]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
"""The Content-Security-Policy of every response: scripts and styles from the dashboard's own static
files only (no inline script or style anywhere), nothing from other hosts, and no framing."""

_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}

CSRF_COOKIE = "pgq_csrf"
CSRF_FIELD = "csrf_token"


def route_path(scope: Scope) -> str:
    """The request's path inside the dashboard: without the prefix it is mounted at (`root_path`)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


def _is_static(scope: Scope) -> bool:
    return route_path(scope).startswith("/static/")


def parse_auth(spec: str) -> tuple[str, str]:
    """Split ``USER:PASSWORD`` at its first colon (a Basic auth user name cannot contain one). Raises
    ValueError when there is no colon or either part is empty."""
    user, sep, password = spec.partition(":")
    if not sep or not user or not password:
        raise ValueError("auth must look like USER:PASSWORD, both non-empty")
    return user, password


def _digest(user: str, password: str) -> bytes:
    return hashlib.sha256(f"{user}:{password}".encode()).digest()


AUTH_FAILURES = 10
"""Wrong credentials one client address may send per AUTH_WINDOW_S before it is answered 429."""
AUTH_WINDOW_S = 60.0
_TRACKED_ADDRESSES = 10_000


class BasicAuth:
    """ASGI middleware: every HTTP request but those for static files needs the credentials `user` and
    `password` (HTTP Basic); others get 401 with a `WWW-Authenticate` challenge (and, under /api/,
    the API's ``{"error": ...}``). The comparison is hmac.compare_digest on SHA-256 digests, so it
    takes the same time whatever the guess. A request for a static file that climbs out of /static/
    (``/static/../api/...``) still only reaches the static files, which refuse it.

    Guessing is throttled per client address: after AUTH_FAILURES requests with wrong credentials in
    a window of AUTH_WINDOW_S seconds (counted from the first), every request from that address gets
    429 with `Retry-After` until the window ends, right credentials included (else the guessing would
    go on). A request without credentials (a browser's first) is not a guess. Behind a proxy, the
    address is the proxy's unless the server passes the client's on (uvicorn's --proxy-headers). The
    count lives in this process; `clock` (monotonic seconds) is for tests."""

    def __init__(self, app: ASGIApp, user: str, password: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self._expected = _digest(user, password)
        self._clock = clock
        self._failures: dict[str, tuple[float, int]] = {}  # address -> (window start, failures)

    def _allowed(self, scope: Scope) -> bool | None:
        """True for the right credentials, False for wrong ones, None for none at all."""
        header = Headers(scope=scope).get("authorization")
        if header is None:
            return None
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        return hmac.compare_digest(_digest(user, password), self._expected) and bool(sep)

    def _wait_s(self, address: str, now: float) -> float:
        """Seconds `address` must wait before its credentials are checked again (0: no wait)."""
        started, failures = self._failures.get(address, (now, 0))
        if now - started >= AUTH_WINDOW_S:
            self._failures.pop(address, None)
            return 0.0
        return AUTH_WINDOW_S - (now - started) if failures >= AUTH_FAILURES else 0.0

    def _failed(self, address: str, now: float) -> None:
        if len(self._failures) >= _TRACKED_ADDRESSES:  # forget finished windows; bounded memory
            self._failures = {a: w for a, w in self._failures.items() if now - w[0] < AUTH_WINDOW_S}
            if len(self._failures) >= _TRACKED_ADDRESSES:
                self._failures.pop(next(iter(self._failures)))
        started, failures = self._failures.get(address, (now, 0))
        self._failures[address] = (started, failures + 1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_static(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = str(client[0]) if client else ""
        now = self._clock()
        wait = self._wait_s(address, now)
        response: Response
        if wait > 0:
            message = "too many wrong user names or passwords from this address: try again later"
            retry = {"Retry-After": str(max(1, math.ceil(wait)))}
            if route_path(scope).startswith("/api/"):
                response = JSONResponse({"error": message}, status_code=429, headers=retry)
            else:
                response = PlainTextResponse(f"429 Too Many Requests: {message}\n", status_code=429, headers=retry)
            await response(scope, receive, send)
            return
        allowed = self._allowed(scope)
        if allowed:
            await self.app(scope, receive, send)
            return
        if allowed is False:
            self._failed(address, now)
        message = "this pgq dashboard needs a user name and password"
        challenge = {"WWW-Authenticate": 'Basic realm="pgq dashboard", charset="UTF-8"'}
        if route_path(scope).startswith("/api/"):
            response = JSONResponse({"error": message}, status_code=401, headers=challenge)
        else:
            response = PlainTextResponse(f"401 Unauthorized: {message}\n", status_code=401, headers=challenge)
        await response(scope, receive, send)


def host_name(header: str) -> str:
    """The host name of a `Host` header, lower-cased, without its port (``[::1]:8787`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class TrustedHosts:
    """ASGI middleware: answers 400 to an HTTP request whose `Host` header (port aside) is not one of
    `hosts`, the defence against DNS rebinding (see the module docstring)."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(host_name(h) if h.startswith("[") else h.strip().lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or host_name(Headers(scope=scope).get("host", "")) in self.hosts:
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            f"400 Bad Request: this dashboard answers to {', '.join(sorted(self.hosts))} only\n", status_code=400)
        await response(scope, receive, send)


class SecurityHeaders:
    """ASGI middleware: adds the Content-Security-Policy and the other security headers to every
    response, `Cache-Control: no-store` to every response but static files (pages show live data,
    and nothing of them belongs in a shared cache), and a `Server-Timing` header with the time the
    dashboard took before answering (`app;dur=<ms>`), which bench/dashboard.py reads."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        static = _is_static(scope)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
                headers["server-timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Csrf:
    """The CSRF tokens of browser forms, under `secret` (random per dashboard unless given: tokens of a
    page rendered by one process are only accepted by processes sharing its secret)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def token(self, cookie: str) -> str:
        """The form token that goes with the cookie value `cookie`."""
        mac = hmac.new(self._secret, b"pgq-csrf:" + cookie.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def cookie_for(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF cookie value, and whether it is new (then the response must set it)."""
        value = request.cookies.get(CSRF_COOKIE, "")
        if 20 <= len(value) <= 100 and value.isascii():
            return value, False
        return secrets.token_urlsafe(32), True

    def set_cookie(self, response: Response, request: Request, value: str) -> None:
        """Set the CSRF cookie on `response`: HttpOnly, SameSite=Strict, Secure over https, for the
        dashboard's path only."""
        path = request.scope.get("root_path", "").rstrip("/") or "/"
        response.set_cookie(CSRF_COOKIE, value, httponly=True, samesite="strict", path=path,
                            secure=request.url.scheme == "https")

    def check_form(self, request: Request, form: Mapping[str, object]) -> None:
        """Raise HttpError(403) unless the form's token matches the request's cookie, and the request
        comes from the dashboard's own origin (check_same_origin)."""
        check_same_origin(request)
        cookie = request.cookies.get(CSRF_COOKIE, "")
        sent = form.get(CSRF_FIELD)
        if not cookie:
            raise HttpError(403, "the CSRF cookie is missing (cookies off?): reload the page and try again")
        if not isinstance(sent, str) or not sent:
            raise HttpError(403, "the form carries no CSRF token: reload the page and try again")
        if not hmac.compare_digest(sent.encode(), self.token(cookie).encode()):
            raise HttpError(403, "the CSRF token is wrong or expired (the dashboard restarted?): reload the page "
                                 "and try again")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) origin, the port defaulted by the scheme; None when it is not
    one (another scheme, no host, a malformed port)."""
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    return scheme, parts.hostname, port if port is not None else _DEFAULT_PORTS[scheme]


def check_same_origin(request: Request) -> None:
    """Raise HttpError(403) when the request says it comes from another site: `Sec-Fetch-Site` other
    than same-origin or none, or an `Origin` that differs from the dashboard's own in scheme, host or
    port (the dashboard's: the request's scheme, as the server or its proxy headers say, and its
    `Host` header)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise HttpError(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is None:
        return
    scheme, sep, netloc = origin.partition("://")
    sent = _origin(scheme, netloc) if sep and "/" not in netloc else None
    own = _origin(request.url.scheme, request.headers.get("host", ""))
    if sent is None or own is None or sent != own:
        raise HttpError(403, "cross-origin request refused: its Origin is not this dashboard's")


def check_api_request(request: Request) -> None:
    """Raise HttpError(403) unless an API action is sent with `Content-Type: application/json` and
    from the dashboard's own origin when it names one (see the module docstring)."""
    check_same_origin(request)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise HttpError(403, "API actions need the header 'Content-Type: application/json' (a CSRF defence; "
                             "the body may be empty or {})")
