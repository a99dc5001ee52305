"""The HTTP side of the metrics server (pgq.metrics.MetricsServer): a request handler and a threading
server that carries what it serves. Apart from pgq.metrics so that only a worker that serves metrics
imports http.server (a few milliseconds of every worker's start-up otherwise)."""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from .metrics import BacklogReader, Metrics

logger = logging.getLogger("pgq.metrics")


class _Handler(BaseHTTPRequestHandler):
    server: MetricsHTTPServer
    timeout = 10  # seconds a client may take to send its request

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            srv = self.server
            body = srv.metrics.render(srv.reader.read() if srv.reader is not None else None).encode()
            self._reply(200, CONTENT_TYPE, body)
        elif path == "/":
            self._reply(200, "text/plain; charset=utf-8", b"pgq worker: metrics at /metrics\n")
        else:
            self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("metrics: %s " + format, self.address_string(), *args)


class MetricsHTTPServer(ThreadingHTTPServer):
    """Binds `address` when built (OSError when it cannot) and answers each request in a daemon
    thread: /metrics renders `metrics`, with `reader`'s database gauges when given."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: Metrics, reader: BacklogReader | None) -> None:
        self.metrics = metrics
        self.reader = reader
        super().__init__(address, _Handler)
