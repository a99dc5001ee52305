"""`create_app`: the dashboard as an ASGI application (Starlette), its routes, its middleware and how
errors are answered."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import psycopg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..app import App
from ..client import AsyncQueue
from ..errors import PgqError
from .api import Api, json_error
from .dashboard import ACCESS, ACCESS_SCOPE_KEY, Access, Dashboard, Settings
from .errors import HttpError, from_exception
from .pages import Pages
from .security import BasicAuth, SecurityHeaders, TrustedHosts, parse_auth, route_path

__all__ = ["STATIC_DIR", "ScopeAccess", "create_app"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
logger = logging.getLogger("pgq.web")


def create_app(
    dsn_or_queue: str | AsyncQueue,
    *,
    auth: str | tuple[str, str] | None = None,
    read_only: bool = False,
    app: App | None = None,
    refresh_s: float = 5.0,
    title: str = "pgq",
    csrf_secret: bytes | str | None = None,
    pool_size: int = 4,
    pgbouncer: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    trust_network: bool = False,
    actor: Callable[[Request], str | None] | None = None,
) -> Starlette:
    """Build the pgq dashboard: an ASGI app to serve with uvicorn or to mount in your own Starlette or
    FastAPI app (``Mount("/pgq", app=create_app(dsn, auth=...))``: links follow the mount path).

    `dsn_or_queue`: the database, as a DSN (the dashboard opens a pool of up to `pool_size`
    connections on first use, `pgbouncer` as for Queue, and closes it at shutdown; when mounted,
    whose lifespan Starlette does not run, call ``await dashboard.state.dashboard.close()`` at
    shutdown) or an AsyncQueue you open and close. Its role decides what the dashboard may do: pgq's
    admin role cancels, retries, pauses and resumes; others see everything and get 403 on actions.
    `auth`: ``"USER:PASSWORD"`` or ``(user, password)``: every route but the static files then
    answers 401 without those credentials (HTTP Basic; serve it over TLS). `read_only`: every action
    answers 403 and no button is shown. `app`: your pgq App, for the schedules page (its periodic
    schedules and their next run). `refresh_s`: seconds between the live refreshes of the overview,
    workers and job pages. `title`: the name in the page header. `csrf_secret`: the key of the
    forms' CSRF tokens; random unless given, which is what several processes serving one dashboard
    need to share. `allowed_hosts`: answer only requests whose Host header (port aside) is one of
    these names (400 otherwise): the defence of a dashboard without `auth` on a loopback address
    against DNS rebinding, which `pgq dashboard` applies in that case; None: any Host.
    `trust_network`: serve without `auth` and without `allowed_hosts`, trusting whatever reaches the
    app (a proxy that authenticates, a private network) to be allowed to cancel jobs and pause queues.
    `actor`: given a request, the name of its user (None: unknown), recorded as who did each action
    (pgq.job_audit.actor, pgq.paused_queues.paused_by); without it, or when it returns None, the
    user of Starlette's AuthenticationMiddleware (``dashboard:<name>``), else ``dashboard:<auth
    user>`` with `auth`, else ``dashboard``.

    Raises PgqError for a bad argument (auth without a colon, refresh_s <= 0, pool_size < 1), and when
    neither `auth`, `allowed_hosts` nor ``trust_network=True`` is given (such a dashboard answers
    anyone who reaches it, and pages of any site through DNS rebinding).
    Connects to nothing until the first request.
    """
    if isinstance(auth, str):
        try:
            auth = parse_auth(auth)
        except ValueError as exc:
            raise PgqError(str(exc)) from None
    elif auth is not None and (len(auth) != 2 or not all(isinstance(a, str) and a for a in auth)):
        raise PgqError("auth must be 'USER:PASSWORD' or a (user, password) pair of non-empty str")
    if auth is None and allowed_hosts is None and not trust_network:
        raise PgqError("a dashboard without auth must be told who may reach it: pass auth='USER:PASSWORD', "
                       "allowed_hosts=[the names it is served under], or trust_network=True when what "
                       "reaches it (an authenticating proxy, a private network) is trusted")
    if isinstance(refresh_s, bool) or not isinstance(refresh_s, int | float) or not (
            math.isfinite(refresh_s) and refresh_s > 0):
        raise PgqError(f"refresh_s must be a number of seconds > 0, got {refresh_s!r}")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise PgqError(f"pool_size must be an int >= 1, got {pool_size!r}")
    if not isinstance(dsn_or_queue, str | AsyncQueue):
        raise PgqError(f"create_app needs a DSN or an AsyncQueue, got {type(dsn_or_queue).__name__}")
    secret = csrf_secret.encode() if isinstance(csrf_secret, str) else csrf_secret
    if actor is not None and not callable(actor):
        raise PgqError(f"actor must be a callable taking the request, got {type(actor).__name__}")
    default_actor = "dashboard" if auth is None else f"dashboard:{auth[0]}"
    dash = Dashboard(dsn_or_queue, Settings(read_only=read_only, refresh_s=float(refresh_s), title=title, app=app,
                                            actor=default_actor, actor_of=actor),
                     csrf_secret=secret, pool_size=pool_size, pgbouncer=pgbouncer)
    pages, api = Pages(dash), Api(dash)

    async def handle(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            error = HttpError(exc.status_code, exc.detail)
        else:
            error = from_exception(exc) or HttpError(500, "internal error; see the dashboard's log")
            if error.status == 500:
                logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        response = (json_error(error) if route_path(request.scope).startswith("/api/")
                    else pages.error(request, error))
        if isinstance(exc, HTTPException) and exc.headers:
            response.headers.update(exc.headers)
        return response

    async def crash(request: Request, exc: Exception) -> Response:
        # A bug: Starlette logs it after this answer; nothing of it is shown.
        if route_path(request.scope).startswith("/api/"):
            return JSONResponse({"error": "internal error; see the dashboard's log"}, status_code=500)
        return PlainTextResponse("500 Internal Server Error: see the dashboard's log\n", status_code=500)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await dash.close()

    middleware = [Middleware(SecurityHeaders), Middleware(ScopeAccess)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHosts, hosts=list(allowed_hosts)))
    if auth is not None:
        middleware.append(Middleware(BasicAuth, user=auth[0], password=auth[1]))
    starlette = Starlette(
        routes=_routes(pages, api),
        middleware=middleware,
        exception_handlers={HttpError: handle, HTTPException: handle, PgqError: handle, psycopg.Error: handle,
                            Exception: crash},
        lifespan=lifespan,
    )
    starlette.state.dashboard = dash
    return starlette


class ScopeAccess:
    """ASGI middleware: serve a request whose scope carries an `Access` (ACCESS_SCOPE_KEY, set by the
    application embedding the dashboard) with that Access current (read-only for it, its actions
    recorded under its actor)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with its Access, if any, as `dashboard.ACCESS`."""
        access = scope.get(ACCESS_SCOPE_KEY)
        if not isinstance(access, Access):
            await self.app(scope, receive, send)
            return
        token = ACCESS.set(access)
        try:
            await self.app(scope, receive, send)
        finally:
            ACCESS.reset(token)


def _routes(pages: Pages, api: Api) -> list[BaseRoute]:
    post = ["POST"]
    p = functools.partial
    return [
        Route("/", pages.overview),
        Route("/jobs", pages.jobs),
        Route("/jobs/bulk", pages.bulk_confirm),
        Route("/jobs/bulk", pages.bulk_action, methods=post),
        Route("/jobs/{job_id}", pages.job),
        Route("/jobs/{job_id}/cancel", p(pages.job_action, "cancel"), methods=post),
        Route("/jobs/{job_id}/retry", p(pages.job_action, "retry"), methods=post),
        Route("/jobs/{job_id}/run-now", p(pages.job_action, "run_now"), methods=post),
        Route("/queues/pause", p(pages.queue_action, "pause"), methods=post),
        Route("/queues/pause-all", pages.pause_all, methods=post),
        Route("/queues/resume", p(pages.queue_action, "resume"), methods=post),
        Route("/queue", pages.queue),
        Route("/queues/{name:path}/pause", p(pages.queue_action, "pause"), methods=post),
        Route("/queues/{name:path}/resume", p(pages.queue_action, "resume"), methods=post),
        Route("/queues/{name:path}", pages.queue),
        Route("/workers", pages.workers),
        Route("/schedules", pages.schedules),
        Route("/limits", pages.limits),
        Route("/limits", pages.limit_action, methods=post),
        Route("/api/queues", api.queues),
        Route("/api/throughput", api.throughput),
        Route("/api/jobs", api.jobs),
        Route("/api/jobs/{job_id}", api.job),
        Route("/api/jobs/{job_id}/explain", api.explain),
        Route("/api/jobs/{job_id}/cancel", p(api.job_action, "cancel"), methods=post),
        Route("/api/jobs/{job_id}/retry", p(api.job_action, "retry"), methods=post),
        Route("/api/jobs/{job_id}/run-now", p(api.job_action, "run_now"), methods=post),
        Route("/api/queues/{name:path}/pause", p(api.queue_action, "pause"), methods=post),
        Route("/api/queues/{name:path}", api.queue),
        Route("/api/queues/{name:path}/resume", p(api.queue_action, "resume"), methods=post),
        Route("/api/workers", api.workers),
        Route("/api/limits", api.limits),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
