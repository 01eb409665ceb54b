"""A keep-alive HTTP/1.1 stub of a model API on 127.0.0.1, counting the connections it accepts.

Each POST is answered with ``reply()`` (a JSON value) at once. Used by the provider-overhead
benchmark (W10) and by tests/providers/test_http_client.py, which count connections opened and
closed to show that one run's requests share one client.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubServer", "stub_server"]


class StubServer:
    """What the stub saw: connections opened and closed, requests answered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened = 0
        self.closed = 0
        self.requests = 0
        self.all_closed = threading.Event()
        self._lock = threading.Lock()

    def _open(self) -> None:
        with self._lock:
            self.opened += 1
            self.all_closed.clear()

    def _close(self) -> None:
        with self._lock:
            self.closed += 1
            if self.closed == self.opened:
                self.all_closed.set()


@contextmanager
def stub_server(reply: Callable[[], Any]) -> Iterator[StubServer]:
    """A started stub (``url`` is the OpenAI-style base, with ``/v1``), stopped after the block."""
    stub: StubServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a client may reuse the connection

        def setup(self) -> None:
            super().setup()
            # Headers and body leave in separate writes: without this, Nagle's algorithm and
            # the client's delayed ACK add ~40 ms to every answer on a kept-alive connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stub._open()

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                stub._close()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            payload = json.dumps(reply()).encode()
            with stub._lock:
                stub.requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    stub = StubServer(f"http://{host}:{port}/v1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
