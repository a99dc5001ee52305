"""What one dashboard holds: its settings, its database client and how it runs its reads, its
templates and its CSRF secret. `create_app` builds one; the pages and the API share it."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout
from starlette.requests import Request

from .. import _ops
from ..app import App
from ..client import AsyncQueue
from ..client.common import connection_failure
from .security import Csrf
from .views import environment

__all__ = ["ACCESS", "ACCESS_SCOPE_KEY", "ACTOR_MAX", "APPLICATION_NAME", "Access", "Dashboard", "Settings"]

ACTOR_MAX = _ops.ACTOR_MAX
"""Longest actor name recorded (pgq._ops.ACTOR_MAX); a longer one is cut."""

T = TypeVar("T")

APPLICATION_NAME = "pgq dashboard"
"""The application_name of the dashboard's connections (unless its DSN sets one): what a DBA sees in
pg_stat_activity."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How a dashboard behaves; see `create_app` for each."""

    read_only: bool = False
    refresh_s: float = 5.0
    title: str = "pgq"
    app: App | None = None
    actor: str = "dashboard"
    """Who the audit of an action names (pgq.job_audit.actor, pgq.paused_queues.paused_by) when the
    request names nobody (see `Dashboard.actor`): "dashboard", or with Basic auth "dashboard:<user>"."""
    actor_of: Callable[[Request], str | None] | None = None
    """The host application's way to name the user of a request (create_app's `actor`)."""


@dataclass(frozen=True, slots=True)
class Access:
    """What one request may do, as the application that embeds the dashboard decided (the Django
    mount: from the Django user's permissions): `read_only` refuses its actions with `refusal`;
    `actor` is who its actions are recorded as (pgq.job_audit.actor, the dashboard's log)."""

    read_only: bool
    actor: str
    refusal: str = "you may not change jobs or queues here"


ACCESS_SCOPE_KEY = "pgq.access"
"""The key of an `Access` in a request's ASGI scope: set by the embedding application's code (an
HTTP client cannot set scope keys), read into ACCESS by the dashboard for that request."""

ACCESS: ContextVar[Access | None] = ContextVar("pgq_dashboard_access", default=None)
"""The Access of the request being served (None: the dashboard's own settings alone)."""


class Dashboard:
    """A dashboard on one database: `source` is a DSN (the dashboard opens a small pool of its own,
    on each event loop that serves it, on first use, and closes it in `close()`) or an AsyncQueue
    owned by the caller (used as it is, never closed here)."""

    def __init__(self, source: str | AsyncQueue, settings: Settings, *, csrf_secret: bytes | None = None,
                 pool_size: int = 4, pgbouncer: bool = False) -> None:
        self.settings = settings
        self.csrf = Csrf(csrf_secret)
        self.templates = environment()
        self._given = source if isinstance(source, AsyncQueue) else None
        self._dsn = None if isinstance(source, AsyncQueue) else _with_application_name(source)
        self._pool_size = pool_size
        self._pgbouncer = pgbouncer
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[AsyncQueue]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def current(self) -> Settings:
        """The settings for the request being served: `settings`, read-only as well when its Access
        says so, with its Access's actor."""
        access = ACCESS.get()
        if access is None:
            return self.settings
        return replace(self.settings, read_only=self.settings.read_only or access.read_only, actor=access.actor)

    def refusal(self, read_only_message: str) -> str:
        """Why an action of the request being served is refused, given that `current.read_only`:
        `read_only_message` for a dashboard started read-only, else its Access's refusal."""
        access = ACCESS.get()
        return read_only_message if self.settings.read_only or access is None else access.refusal

    def actor(self, request: Request) -> str:
        """Who a request's action is recorded as: the actor of the request's `Access` (the Django
        mount's user) when it has one, else what the host application's `actor` callable says
        (a non-empty str), else the authenticated user Starlette's AuthenticationMiddleware put in
        the scope (``dashboard:<display_name>``), else the settings' actor. At most ACTOR_MAX
        characters; NUL characters are dropped."""
        access = ACCESS.get()
        if access is not None:  # the embedding application (the Django mount) named the user
            return access.actor
        name: str | None = None
        if self.settings.actor_of is not None:
            name = self.settings.actor_of(request)
        if not name and "user" in request.scope:
            user = request.scope["user"]
            if getattr(user, "is_authenticated", False):
                name = f"dashboard:{getattr(user, 'display_name', '') or user}"
        if not isinstance(name, str) or not name.replace("\x00", ""):
            return self.settings.actor
        return name.replace("\x00", "")[:ACTOR_MAX]

    async def queue(self) -> AsyncQueue:
        """The AsyncQueue of the running event loop: the caller's, or one opened now on the DSN."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        future = self._queues.get(loop)
        if future is None:
            future = loop.create_future()
            self._queues[loop] = future
            assert self._dsn is not None
            # A short wait for a connection: a page had better fail with "cannot reach the database"
            # than hang while the server is away.
            queue = AsyncQueue(self._dsn, min_size=1, max_size=self._pool_size, timeout=5.0,
                               pgbouncer=self._pgbouncer)
            try:
                await queue.open()
            except BaseException as exc:
                del self._queues[loop]
                future.set_exception(exc)
                future.exception()  # retrieved: raised below
                raise
            future.set_result(queue)
        return await asyncio.shield(future)

    async def read(self, op: _ops.Operation[T]) -> T:
        """Run the read `op` (see pgq.web.queries) on a connection of the pool, once more should the
        connection turn out to be lost (not when the pool had none to give: it waited long enough)."""
        queue = await self.queue()
        for attempt in (1, 2):
            try:
                async with queue.pool.connection() as conn:
                    return await _ops.run_async(conn, op, own_transaction=True)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not op.retry_safe or not connection_failure(exc) or isinstance(exc, PoolTimeout):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        """Close the queue this dashboard opened on the running event loop (not a caller's). Idempotent."""
        if self._given is not None:
            return
        future = self._queues.pop(asyncio.get_running_loop(), None)
        if future is not None and future.done() and not future.exception():
            await future.result().close()


def _with_application_name(dsn: str) -> str:
    params: dict[str, Any] = conninfo_to_dict(dsn)
    if params.get("application_name"):
        return dsn
    return make_conninfo(dsn, application_name=APPLICATION_NAME)
