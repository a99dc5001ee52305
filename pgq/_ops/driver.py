"""The drivers: `run_sync` and `run_async` are the only code that executes statements. They run
an operation's steps on a connection, in a transaction when it needs one, with pgq's connection
settings and decoders, and translate database errors into pgq's."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.rows import dict_row, tuple_row

from .. import _sql
from ..bounds import Undecodable
from ..errors import CONSTRAINT_MESSAGES, InvalidJob, NotMigrated, PgqError
from .core import Fetch, Operation, Steps, Stmt, T

_raw_decode = json.JSONDecoder().raw_decode
# What raw_decode calls (typeshed leaves it out): (value, end), StopIteration when there is none.
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


class _JsonbBinaryLoader(Loader):
    """jsonb in binary format (the claim's payloads and results), parsed by the json module's C
    scanner straight from text: `json.loads` on bytes, psycopg's default, spends most of its time
    detecting the encoding and checking arguments (about 3.5 µs against 0.9 µs for a small payload,
    which a claim pays once per job). The same values as `json.loads`, and its errors, but for a
    value nested too deeply for Python (written before revision 0019 bounded JSON): that one decodes
    as a `pgq.bounds.Undecodable`, so that it never fails the whole claim or listing it came in."""

    format = Format.BINARY
    decoded_bytes = 0
    """Bytes of jsonb this process has decoded so far, all connections together (see
    `jsonb_bytes_decoded`)."""

    def load(self, data: Buffer) -> Any:
        _JsonbBinaryLoader.decoded_bytes += len(data)
        if not data or data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format: {data[0] if data else 'empty'}")
        text = str(memoryview(data)[1:], "utf-8")
        # Once per claimed job: the C scanner straight away, without raw_decode's and _decoded's
        # Python frames; anything but a whole, well-formed value takes _decoded's path.
        try:
            value, end = _scan_once(text, 0)
        except (ValueError, StopIteration, RecursionError):
            return _decoded(text, len(data))
        return value if end == len(text) else _decoded(text, len(data))


class _JsonbTextLoader(Loader):
    """jsonb in text format (statements whose results psycopg reads as text): `json.loads`, but for a
    value nested too deeply for Python, which decodes as a `pgq.bounds.Undecodable` (see
    _JsonbBinaryLoader)."""

    format = Format.TEXT

    def load(self, data: Buffer) -> Any:
        return _decoded(str(data, "utf-8"), len(data))


def _decoded(text: str, size: int) -> Any:
    try:
        try:
            value, end = _raw_decode(text)
        except ValueError:
            return json.loads(text)  # raises the error json.loads raises
        return value if end == len(text) else json.loads(text)
    except RecursionError:
        return Undecodable("nested too deeply for Python's json module", size)


_JSONB_OID = psycopg.postgres.types["jsonb"].oid


def jsonb_bytes_decoded() -> int:
    """How many bytes of jsonb values (payloads, results) pgq's loader has decoded in this process so
    far, on every connection it is installed on. A worker reads it before and after a claim to learn
    how big its jobs' payloads are; other decoding meanwhile (a concurrent claim, a handler reading
    jobs) only makes that figure larger. Locks nothing."""
    return _JsonbBinaryLoader.decoded_bytes


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Set up a new connection of a pool pgq creates and owns (never a caller's connection); the
    pool's `configure` callback. Installs pgq's loaders, so that its statements skip the per-cursor
    set-up (a few microseconds each, and ten times that when the process was idle: on the wake-up
    path of an idle worker), and sets the session's time zone to UTC (sql/session_utc.sql says why:
    datetimes pgq reads on its own connections are in UTC). Leaves no transaction open. Raises
    psycopg errors of the statement (the pool then discards the connection and tries again)."""
    conn.adapters.register_loader("jsonb", _JsonbBinaryLoader)
    conn.adapters.register_loader("jsonb", _JsonbTextLoader)
    if conn.info.parameter_status("TimeZone") != "UTC":
        conn.execute(_sql.query("session_utc"))
        if not conn.autocommit:
            conn.commit()


async def configure_connection_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """`configure_connection` for a connection of an AsyncConnectionPool."""
    conn.adapters.register_loader("jsonb", _JsonbBinaryLoader)
    conn.adapters.register_loader("jsonb", _JsonbTextLoader)
    if conn.info.parameter_status("TimeZone") != "UTC":
        await conn.execute(_sql.query("session_utc"))
        if not conn.autocommit:
            await conn.commit()


def install_loaders(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Make `cur` decode jsonb as pgq does (a value too deep for Python's json becomes a
    `pgq.bounds.Undecodable`, never an exception), whatever its connection's loaders: for a cursor
    on a connection that is not pgq's (the Django backend's)."""
    cur.adapters.register_loader("jsonb", _JsonbBinaryLoader)
    cur.adapters.register_loader("jsonb", _JsonbTextLoader)


def _cursor_adapters(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    # On the cursor, not the connection: a connection from a caller's pool keeps its own loaders.
    # Connections of pgq's own pools have them already (configure_connection).
    if cur.connection.adapters.get_loader(_JSONB_OID, Format.BINARY) is not _JsonbBinaryLoader:
        install_loaders(cur)


TRANSACTION_IDLE_LIMIT = "5s"
"""How long a transaction pgq opened itself may sit idle before the server ends its session (see
`transaction_guard.sql`, which also turns JIT compilation off in it): its statements follow each
other within milliseconds."""
_GUARD_PARAMS = {"idle_limit": TRANSACTION_IDLE_LIMIT}


def _needs_guard(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], op: Operation[Any]) -> bool:
    # For an operation the driver runs in a transaction: whether that transaction is its own (not a
    # savepoint in the caller's, whose settings are the caller's) and the operation does not apply
    # the guard's settings itself.
    return not op.guards_itself and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


KEPT_CURSOR_MAX_ROWS = 4
"""A cursor kept for the next operation (`keeps_cursor`) holds its last result in memory until that
operation's first statement replaces it; one that returned more rows than this is closed instead. Short
calls, whose set-up a kept cursor saves (an enqueue, an idle worker's claim, a heartbeat), return a few
rows; bigger results pay for a new cursor many times over."""


def keeps_cursor(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether `cur`, which ran an operation's statements (`run_sync` / `run_async` with `cursor=`), may
    be kept for the next operation on its connection: it is open and its last result holds at most
    KEPT_CURSOR_MAX_ROWS rows. A kept cursor reuses the loaders and dumpers it found for the columns and
    parameters it has seen, which a new cursor looks up and builds again."""
    return not cur.closed and cur.rowcount <= KEPT_CURSOR_MAX_ROWS


def run_sync(conn: psycopg.Connection[Any], op: Operation[T], *, own_transaction: bool,
             cursor: psycopg.Cursor[Any] | None = None) -> T:
    """Drive `op` (and the operations its `then` chains) to completion on `conn` (not closed; the
    caller owns it).

    The statements run on `cursor`, a cursor of `conn` that is left open (see `keeps_cursor`), or
    else on a new cursor per operation, closed at its end.

    With `own_transaction`, an operation marked `transaction` runs inside `conn.transaction()`
    (a savepoint when the connection is already in a transaction). A transaction begun here first
    runs `transaction_guard.sql` (unless the operation `guards_itself`): the server ends the session
    if it then idles for more than TRANSACTION_IDLE_LIMIT, and compiles none of its statements with
    JIT. Both settings end with the transaction. Database errors are thrown into the operation, which
    may translate them; whatever escapes is raised here.
    """
    current: Operation[T] | None = op
    result: T
    while current is not None:
        in_transaction = current.transaction and own_transaction
        guard = in_transaction and _needs_guard(conn, current)
        ctx: AbstractContextManager[Any] = conn.transaction() if in_transaction else nullcontext()
        with ctx, (conn.cursor(row_factory=dict_row) if cursor is None else nullcontext(cursor)) as cur:
            _cursor_adapters(cur)
            if guard:
                cur.execute(_sql.query("transaction_guard"), _GUARD_PARAMS)
            steps = current.steps()
            step = _step(steps, None, None)
            while isinstance(step, Stmt):
                cur.row_factory = _ROW_FACTORY[step.fetch]
                try:
                    cur.execute(_sql.query(step.name), step.params, binary=step.fetch == "tuples")
                    got = cur.fetchall() if step.fetch in _FETCHING else _count(cur, step)
                except psycopg.Error as exc:
                    step = _step(steps, None, exc)
                else:
                    step = _step(steps, got, None)
            result = step.value
        current = current.then(result) if current.then is not None else None
    return result


async def run_async(conn: psycopg.AsyncConnection[Any], op: Operation[T], *, own_transaction: bool,
                    cursor: psycopg.AsyncCursor[Any] | None = None) -> T:
    """The asyncio twin of `run_sync` (the driver loop only; the operations are shared)."""
    current: Operation[T] | None = op
    result: T
    while current is not None:
        in_transaction = current.transaction and own_transaction
        guard = in_transaction and _needs_guard(conn, current)
        ctx: AbstractAsyncContextManager[Any] = conn.transaction() if in_transaction else _anull()
        async with ctx, (conn.cursor(row_factory=dict_row) if cursor is None else nullcontext(cursor)) as cur:
            _cursor_adapters(cur)
            if guard:
                await cur.execute(_sql.query("transaction_guard"), _GUARD_PARAMS)
            steps = current.steps()
            step = _step(steps, None, None)
            while isinstance(step, Stmt):
                cur.row_factory = _ROW_FACTORY[step.fetch]
                try:
                    await cur.execute(_sql.query(step.name), step.params, binary=step.fetch == "tuples")
                    got = await cur.fetchall() if step.fetch in _FETCHING else _count(cur, step)
                except psycopg.Error as exc:
                    step = _step(steps, None, exc)
                else:
                    step = _step(steps, got, None)
            result = step.value
        current = current.then(result) if current.then is not None else None
    return result


_FETCHING = ("rows", "tuples")
_ROW_FACTORY: dict[Fetch, Any] = {"rows": dict_row, "tuples": tuple_row, "rowcount": dict_row, "none": dict_row}


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _step(steps: Steps[T], result: Any, error: psycopg.Error | None) -> Stmt | _Done[T]:
    """Advance an operation by one statement: send it the last result (or throw the translated
    error into it); return its next statement, or its final value."""
    try:
        return steps.throw(_translate(error)) if error is not None else steps.send(result)
    except StopIteration as stop:
        return _Done(stop.value)


def _count(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], stmt: Stmt) -> int | None:
    return cur.rowcount if stmt.fetch == "rowcount" else None


class _anull(AbstractAsyncContextManager[None]):
    async def __aexit__(self, *exc: object) -> None:
        return None


def _translate(exc: psycopg.Error) -> BaseException:
    """Map errors whose meaning pgq knows: a missing schema, and constraint violations by name."""
    mapped: BaseException = exc
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction | pg_errors.InvalidSchemaName):
        mapped = NotMigrated(
            f"the pgq schema is missing or outdated; run `pgq migrate` ({exc.diag.message_primary})"
        )
    elif isinstance(exc, pg_errors.CheckViolation):
        message = CONSTRAINT_MESSAGES.get(exc.diag.constraint_name or "")
        if message:
            mapped = InvalidJob(message)
    elif isinstance(exc, pg_errors.ProgramLimitExceeded):
        # A btree entry holds at most 2704 bytes (after compression): queue names, kinds (revision
        # 0027's jobs_claim_kind_idx) and dedupe keys are indexed, so a huge one fails the statement,
        # which wrote nothing.
        mapped = InvalidJob(f"a value is too large for pgq's indexes ({exc.diag.message_primary}): keep queue "
                            "names, kinds and dedupe keys under about 2 KB")
    elif isinstance(exc, pg_errors.InvalidSqlStatementName | pg_errors.DuplicatePreparedStatement):
        # pgq never prepares by name itself: psycopg's automatic prepared statements met a pooler
        # that moves transactions between server connections.
        mapped = PgqError(
            f"{exc.diag.message_primary}: is this DSN a PgBouncer in transaction pooling mode? Then pass "
            "pgbouncer=True (pgq worker/commands: --pgbouncer) so that no statement is prepared"
        )
    if mapped is not exc:
        mapped.__cause__ = exc
    return mapped
