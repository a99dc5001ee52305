"""A TCP proxy for fault tests: sits between workers and PostgreSQL and, on command, cuts, stalls or
black-holes the connections passing through it, or refuses new ones.

It runs an asyncio loop in a daemon thread; every control method is thread-safe and returns once the
fault is in place. No external service: the tests start one proxy per fault domain (say, one for the
worker's pool and one for its LISTEN connection) in front of the test server.

It also reads the PostgreSQL wire protocol from clients (unencrypted: its DSNs say sslmode=disable),
enough to know which statement each connection executes, so a test can cut a connection at one
chosen statement (`arm`): just before the server gets it, or once the server has run it and before
its answer reaches the client. Prepared statements are followed from their Parse to every Bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

_UNTYPED_REQUESTS = {80877103, 80877104}  # SSLRequest, GSSENCRequest: the server answers one byte


@dataclass
class Arm:
    """A cut waiting for a statement whose text contains `marker`: `phase` "before" drops the message
    and cuts; "during" forwards it and cuts when the first bytes of the server's answer come back (a
    result bigger than the server's send buffer is then cut before the statement's implicit
    transaction committed: it rolls back); "after" forwards it, holds back the server's answer until
    the server says it is ready for the next query (the statement committed), and cuts then, so the
    client never sees the answer. Fires `times` times; `fired` counts, `event` is set at each.

    `at_commit`: the statement containing `marker` only picks the transaction (one opened by BEGIN on
    that connection); the cut, `phase` as above, is made at that transaction's COMMIT: "before" drops
    the COMMIT (the server rolls the transaction back), "after" lets it commit and keeps the answer
    from the client. A ROLLBACK instead puts the arm back for the next transaction. `then_stall`:
    once it fired, stall every connection (as `FaultProxy.stall`) until `resume()`, so that the
    client can do nothing more, not even retry on a new connection, until the test says so."""

    marker: str
    phase: Literal["before", "during", "after"]
    times: int = 1
    at_commit: bool = False
    then_stall: bool = False
    fired: int = 0
    statements: list[str] = field(default_factory=list)  # the first line of each statement it cut
    event: threading.Event = field(default_factory=threading.Event)


def _ready_for_query(data: bytes) -> bool:
    """Whether the server's messages in `data` (from a message boundary) include ReadyForQuery."""
    at = 0
    while at + 5 <= len(data):
        kind = data[at:at + 1]
        (length,) = struct.unpack("!i", data[at + 1:at + 5])
        if kind == b"Z" and at + 1 + length <= len(data):
            return True
        at += 1 + length
    return False


class _Stream:
    """Splits a client's byte stream into protocol messages and names the statement each Bind or
    simple Query executes (None for other messages)."""

    def __init__(self) -> None:
        self._buf = b""
        self._started = False
        self._prepared: dict[str, str] = {}
        self.in_transaction = False  # between a BEGIN and its COMMIT or ROLLBACK
        self.commit_arm: Arm | None = None  # an `at_commit` arm waiting for this transaction's end

    def feed(self, data: bytes) -> list[str]:
        """Add `data`; return the texts of the statements whose execution request completed in it."""
        self._buf += data
        texts: list[str] = []
        while True:
            if not self._started:
                if len(self._buf) < 8:
                    return texts
                (length,) = struct.unpack("!i", self._buf[:4])
                if len(self._buf) < length:
                    return texts
                (code,) = struct.unpack("!i", self._buf[4:8])
                self._buf = self._buf[length:]
                self._started = code not in _UNTYPED_REQUESTS
                continue
            if len(self._buf) < 5:
                return texts
            kind = self._buf[:1]
            (length,) = struct.unpack("!i", self._buf[1:5])
            if len(self._buf) < 1 + length:
                return texts
            body, self._buf = self._buf[5:1 + length], self._buf[1 + length:]
            if kind == b"Q":
                texts.append(body.split(b"\0", 1)[0].decode(errors="replace"))
            elif kind == b"P":
                name, rest = body.split(b"\0", 1)
                self._prepared[name.decode()] = rest.split(b"\0", 1)[0].decode(errors="replace")
            elif kind == b"B":
                _portal, rest = body.split(b"\0", 1)
                texts.append(self._prepared.get(rest.split(b"\0", 1)[0].decode(), ""))


class FaultProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port`. States: forwarding (default),
    `stall()`ed (bytes are held until `resume()`), `blackhole()`d (bytes are dropped for ever, the
    connections stay open: a half-open network), `refuse()` (new connections are closed at once).
    `cut()` aborts every open connection. `connections` counts the connections accepted so far."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._dropping = False
        self._refusing = False
        self._arms: list[Arm] = []
        self.connections = 0
        self.cuts = 0
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        return int(self._server.sockets[0].getsockname()[1])

    def dsn(self, dbname: str, user: str = "postgres") -> str:
        """A DSN for database `dbname` through the proxy (no TLS: the proxy reads the protocol)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}?sslmode=disable&gssencmode=disable"

    def arm(self, marker: str, phase: Literal["before", "during", "after"], times: int = 1, *,
            at_commit: bool = False, then_stall: bool = False) -> Arm:
        """Cut the connection that next executes a statement containing `marker`, or with `at_commit`
        at the COMMIT of the transaction that executes it (see `Arm`)."""
        armed = Arm(marker, phase, times, at_commit, then_stall)
        self._call(lambda: self._arms.append(armed))
        return armed

    def cut(self) -> int:
        """Abort every open connection (the peers see a reset); returns how many were cut."""
        return int(self._call(self._cut))

    def disarm(self, armed: Arm) -> None:
        """Forget `armed` if it has not fired its last time yet."""

        def drop() -> None:
            if armed in self._arms:
                self._arms.remove(armed)

        self._call(drop)

    def stall(self) -> None:
        """Hold every byte in both directions until `resume()`; connections stay open."""
        self._call(self._flowing.clear)

    def resume(self) -> None:
        """End a stall, a black hole and a refusal: forward again."""

        def resume() -> None:
            self._dropping = False
            self._refusing = False
            self._flowing.set()

        self._call(resume)

    def blackhole(self) -> None:
        """Drop every byte from now on, in both directions, and keep the connections open."""

        def drop() -> None:
            self._dropping = True

        self._call(drop)

    def refuse(self) -> None:
        """Close new connections at once (the server looks down); open ones are not touched."""

        def refuse() -> None:
            self._refusing = True

        self._call(refuse)

    def close(self) -> None:
        """Stop listening, cut everything, and let every task of the proxy's loop end before stopping it:
        a connection accepted just before (its `_accept` task created, not started) otherwise left
        "coroutine ... was never awaited" warnings after pytest's summary. New connections are refused
        at once meanwhile, and cut ones end their pumps; what is left after a second is cancelled."""
        async def shutdown() -> None:
            self._server.close()
            self._refusing = True
            tasks: list[asyncio.Task[Any]] = []
            for _ in range(20):
                self._cut()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not tasks:
                    return
                await asyncio.wait(tasks, timeout=0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # -- inside the proxy's loop

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        ready.set()
        self._loop.run_forever()

    def _call(self, func: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return func()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _cut(self) -> int:
        pairs = list(self._pairs)
        for client, upstream in pairs:
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()
        self.cuts += len(pairs)
        return len(pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        cut_on_answer: list[Arm] = []
        try:
            await asyncio.gather(self._pump(reader, up_writer, pair, _Stream(), cut_on_answer),
                                 self._pump(up_reader, writer, pair, None, cut_on_answer))
        finally:
            self._pairs.discard(pair)
            for w in pair:
                with contextlib.suppress(Exception):
                    w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter], stream: _Stream | None,
                    cut_on_answer: list[Arm]) -> None:
        # `stream`: the client's side (parsed for armed statements); None: the server's answers.
        held = b""  # the server's answer held back by an "after" cut
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()
                if self._dropping:
                    continue
                if stream is not None and (self._arms or stream.commit_arm is not None):
                    fire = self._armed(stream.feed(data), stream)
                    if fire is not None and fire.phase == "before":
                        self._fire(fire, pair)
                        return
                    if fire is not None:
                        cut_on_answer.append(fire)
                elif stream is not None:
                    stream.feed(data)
                elif cut_on_answer:
                    armed = cut_on_answer[-1]
                    if armed.phase == "during" or _ready_for_query(held := held + data):
                        self._fire(cut_on_answer.pop(), pair)
                        return
                    continue  # "after": hold the answer back until the statement is over
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.transport.abort()

    def _armed(self, texts: list[str], stream: _Stream) -> Arm | None:
        for text in texts:
            word = text.split(None, 1)[0].rstrip(";").upper() if text.strip() else ""
            if word in ("BEGIN", "START"):
                stream.in_transaction = True
            elif word in ("COMMIT", "END", "ROLLBACK", "ABORT"):
                stream.in_transaction = False
                waiting, stream.commit_arm = stream.commit_arm, None
                if waiting is not None and word in ("COMMIT", "END"):
                    return self._count(waiting, text)
                if waiting is not None:
                    self._arms.append(waiting)  # rolled back: wait for the marker again
            for armed in self._arms:
                if armed.marker not in text:
                    continue
                if not armed.at_commit:
                    if armed.fired + 1 >= armed.times:
                        self._arms.remove(armed)
                    return self._count(armed, text)
                if stream.in_transaction and stream.commit_arm is None:
                    self._arms.remove(armed)  # this transaction's, until its end
                    stream.commit_arm = armed
                    break
        return None

    def _count(self, armed: Arm, text: str) -> Arm:
        armed.fired += 1
        armed.statements.append(text.strip().splitlines()[0] if text.strip() else "")
        if armed.at_commit and armed.fired < armed.times:
            self._arms.append(armed)
        return armed

    def _fire(self, armed: Arm, pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        for w in pair:
            w.transport.abort()
        self._pairs.discard(pair)
        self.cuts += 1
        if armed.then_stall:
            self._flowing.clear()
        armed.event.set()
