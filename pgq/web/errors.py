"""The dashboard's errors: `HttpError` (a status and a message a person can act on), and how pgq's and
psycopg's exceptions become one. Pages show the message on an error page, the API as
``{"error": message}``; nothing answers with a traceback."""

from __future__ import annotations

import logging

import psycopg
from psycopg import errors as pg_errors

from ..errors import InvalidJob, InvalidState, NotFound, NotMigrated, PgqError

__all__ = ["HttpError", "from_exception"]

logger = logging.getLogger("pgq.web")


class HttpError(Exception):
    """A request the dashboard answers with `status` and `message` (one line, safe to show)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def from_exception(exc: BaseException) -> HttpError | None:
    """The HttpError an exception of pgq or psycopg stands for, or None for anything else (a bug: the
    caller answers 500 and logs it).

    NotFound: 404. InvalidState (cancel a finished job, retry a queued one): 409. InvalidJob (input
    pgq rejects): 400. A privilege the database refused: 403 with its message. No schema: 503, saying
    to migrate. The database unreachable, a pool without a free connection, a statement over its
    timeout: 503.
    """
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, NotFound):
        return HttpError(404, str(exc))
    if isinstance(exc, InvalidState):
        return HttpError(409, str(exc))
    if isinstance(exc, InvalidJob):
        return HttpError(400, str(exc))
    if isinstance(exc, NotMigrated):
        return HttpError(503, str(exc))
    if isinstance(exc, PgqError):
        return HttpError(500, str(exc))
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        hint = exc.diag.message_hint
        message = exc.diag.message_primary or "permission denied"
        return HttpError(403, f"{message} ({hint})" if hint else message)
    if isinstance(exc, pg_errors.QueryCanceled):
        return HttpError(503, "the database did not answer in time (statement timeout); try again")
    if isinstance(exc, pg_errors.LockNotAvailable):
        return HttpError(503, "a lock could not be taken in time (a worker may hold it); nothing was changed")
    if isinstance(exc, psycopg.OperationalError):
        logger.warning("database unavailable: %s", " ".join(str(exc).split()))
        return HttpError(503, "the database cannot be reached right now; try again")
    if isinstance(exc, psycopg.Error):
        logger.error("database error", exc_info=exc)
        state = getattr(exc, "sqlstate", None) or "unknown"
        return HttpError(500, f"database error (SQLSTATE {state}); see the dashboard's log")
    return None
