"""The edge's guard on its connections: a request's headers must arrive in time, and the
open connections are capped.

uvicorn serves the edge with h11, which bounds how large an incomplete request may grow
(16 KiB) but not how long it may take: uvicorn's keep-alive timeout runs only while a
connection is idle between requests and stops at the next request's first byte. So a
client that sends a header byte every few seconds held its connection (and a file
descriptor) for as long as it liked, and nothing bounded how many it opened. uvicorn
has no header-read timeout; its `limit_concurrency` answers 503 only once a request's
headers are read whole, which a trickling client never reaches. Hence this protocol:
uvicorn's own h11 protocol with

- a deadline for the headers: `edge_header_timeout_s` from the connection's opening, or
  from the end of its previous response, to the end of the next request's headers; past
  it the connection is answered 408 (when part of a request came) and closed;
- a cap: a connection accepted while `edge_max_connections` are open is answered 503
  and closed at once, before anything is read from it.

A request body's deadline (`edge_body_timeout_s`) is the app's (`app.py`), where the body
is read. Over TLS, the client's verified certificate (if it sent one) is handed to the
app in each request's scope state (`PEER_CERT`), for `auth.py`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.edge.metrics import EdgeMetrics

# Closed by the guard: why, as the metric labels it.
TOO_MANY_CONNECTIONS = "too_many_connections"
HEADER_TIMEOUT = "header_timeout"
BODY_TIMEOUT = "body_timeout"
# The scope state's key of the TLS client certificate (as ssl's getpeercert() gives it).
PEER_CERT = "agui_peer_cert"


def _closing_response(status: bytes, error: str, detail: str) -> bytes:
    body = orjson.dumps({"error": error, "detail": detail}) + b"\n"
    head = (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    return head + body


_BUSY = _closing_response(
    b"503 Service Unavailable", "busy", "too many open connections to the edge; retry later"
)
_TIMEOUT = _closing_response(
    b"408 Request Timeout", "request_timeout", "the request's headers came in too slowly"
)


def guarded_protocol(
    header_timeout_s: float, max_connections: int, metrics: EdgeMetrics
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the header deadline and the connection cap."""

    class GuardedH11(_GuardedH11):
        pass

    GuardedH11.header_timeout_s = header_timeout_s
    GuardedH11.max_connections = max_connections
    GuardedH11.metrics = metrics
    return GuardedH11


class _GuardedH11(H11Protocol):
    header_timeout_s: float
    max_connections: int
    metrics: EdgeMetrics

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: asyncio.TimerHandle | None = None
        self._request_begun = False  # a byte of the awaited request came
        self._served = False  # a response was sent on this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peercert")
        if peer:  # verified by the TLS handshake against edge_ssl_ca_certs
            self.app_state = {**self.app_state, PEER_CERT: peer}
        self.metrics.open_connections.inc()
        if len(self.connections) > self.max_connections:
            self.metrics.connections_closed.labels(TOO_MANY_CONNECTIONS).inc()
            transport.write(_BUSY)
            transport.close()
            return
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self.metrics.open_connections.dec()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._headers_due is not None:
            self._request_begun = True
        super().data_received(data)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's headers were read whole: it is served
            self._stop_waiting()

    def on_response_complete(self) -> None:
        self._served = True
        if not self.transport.is_closing():
            self._await_headers()  # before the next request (pipelined, it stops it again)
        super().on_response_complete()

    def _await_headers(self) -> None:
        self._stop_waiting()
        self._request_begun = False
        self._headers_due = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        self._headers_due = None
        if self.transport.is_closing():
            return
        if self._request_begun:
            self.transport.write(_TIMEOUT)
        # Kept alive after a response and idle: closed without a word, as uvicorn's own
        # keep-alive timeout does, and not counted (a connection that never sent a whole
        # request is).
        if self._request_begun or not self._served:
            self.metrics.connections_closed.labels(HEADER_TIMEOUT).inc()
        self.transport.close()
