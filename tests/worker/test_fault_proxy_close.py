"""The tests' fault proxy itself: closing it while connections arrive leaves nothing behind that
prints after pytest's summary (issue #45 asked for no traceback or warning there)."""

from __future__ import annotations

import gc
import socket
import threading
import warnings

from ..faultproxy import FaultProxy


def test_closing_the_proxy_as_connections_arrive_leaves_no_coroutine_unawaited() -> None:
    """A listener stands in for the server; clients keep connecting while the proxy closes. No
    "coroutine ... was never awaited" (nor any other) RuntimeWarning is issued, and the proxy's
    thread ends."""
    upstream = socket.create_server(("127.0.0.1", 0))
    upstream.listen(64)
    host, port = upstream.getsockname()[:2]
    stop = threading.Event()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            proxy = FaultProxy(host, port)

            def knock(target: int = proxy.port) -> None:
                while not stop.is_set():
                    try:
                        socket.create_connection(("127.0.0.1", target), timeout=0.5).close()
                    except OSError:
                        return

            knockers = [threading.Thread(target=knock) for _ in range(4)]
            for t in knockers:
                t.start()
            proxy.close()
            stop.set()
            for t in knockers:
                t.join(5)
            stop.clear()
            assert not proxy._thread.is_alive()
            del proxy
            gc.collect()
    upstream.close()
    unawaited = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert unawaited == []
