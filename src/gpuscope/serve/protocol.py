"""The HTTP/1.1 connection under both servers: uvicorn's h11 protocol, with a deadline and the API's error shape.

uvicorn waits as long as a client likes for a request to arrive: a client
that sends its headers one byte a second (slowloris), or promises a body it
never sends, holds a connection for hours, and enough of them exhaust the
server's sockets. Here every request must arrive whole, headers and body,
within ``REQUEST_TIMEOUT_S`` of its first byte (or of the connection, for the
first); past it the client gets a 408 and the connection is closed, whatever
the app was waiting for. An idle keep-alive connection is closed after
uvicorn's ``timeout_keep_alive``; a TLS handshake not done within
``TLS_HANDSHAKE_TIMEOUT_S`` is cut off (asyncio's default, 60 s, let a client
that connects and never says hello hold a socket for a minute), through the
event loop uvicorn runs on (``GuardedLoop``).

Connections cannot be hoarded. Past ``MAX_CONNECTIONS`` open at once, a new
connection makes room: the server lets go of the one that has waited longest
without a request being worked on (idle, or its request still arriving,
answered 503 if it was sending one), at once, without TLS's close exchange
that waits on the peer. A client that holds hundreds of idle connections,
with or without the token, only ever pushes out its own oldest; a request
the app is working on is never cut, and only when every connection has one
is the new connection answered 503. Likewise past ``MAX_HANDSHAKES`` TLS
handshakes in progress, the oldest is cut off (``GuardedLoop``): connections
that never say hello cannot fill the server's sockets either.

What h11 refuses (control characters in a header, two Content-Lengths, bad
chunks, headers over ``MAX_HEADER_BYTES`` while they arrive) is answered in
the one error shape of the API instead of uvicorn's plain text, with nothing
of the request in it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from gpuscope.platform.access import error_body
from gpuscope.serve.security import MAX_HEADER_BYTES

REQUEST_TIMEOUT_S = 10.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# Open connections at once (a fleet client holds one per node, a browser a few), and TLS handshakes in
# progress: together well under the usual 1,024 file descriptors a process may hold.
MAX_CONNECTIONS = 256
MAX_HANDSHAKES = 256
_ARRIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.SWITCHED_PROTOCOL)


def error_response(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response in the API's error shape, that closes the connection."""
    body = error_body(code, message)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncache-control: no-store\r\n"
        f"x-content-type-options: nosniff\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedLoop(asyncio.SelectorEventLoop):
    """asyncio's event loop, with a deadline for the TLS handshake of every connection a server accepts.

    uvicorn's ``loop`` setting names it (``"gpuscope.serve.protocol:GuardedLoop"``): it calls it for the loop.
    Past ``MAX_HANDSHAKES`` handshakes in progress the oldest is cut off: a client that opens connections
    and never says hello holds each for the handshake deadline, and enough of them would fill the server's
    sockets while a real client waited in the accept queue.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Handshakes in progress, oldest first (a dict keeps insertion order); each leaves when it ends.
        self._handshaking: dict[asyncio.Transport, None] = {}

    async def create_server(self, *args: Any, **kwargs: Any) -> asyncio.Server:
        if kwargs.get("ssl") is not None and kwargs.get("ssl_handshake_timeout") is None:
            kwargs["ssl_handshake_timeout"] = TLS_HANDSHAKE_TIMEOUT_S
        return await super().create_server(*args, **kwargs)

    def _make_ssl_transport(self, *args: Any, **kwargs: Any) -> Any:
        # asyncio's own step for a connection it wraps in TLS: ``waiter`` resolves when the handshake ends
        # (done, failed, timed out or cut off), which is when a server's connection leaves the count.
        transport = super()._make_ssl_transport(*args, **kwargs)  # type: ignore[misc]
        waiter = kwargs.get("waiter")
        if kwargs.get("server_side") and isinstance(waiter, asyncio.Future):
            # Counted soon, not now: the TLS layer learns of its socket in a callback the transport has just
            # queued (before it, abort would reach no socket), and callbacks run in the order they were queued.
            self.call_soon(self._count_handshake, transport, waiter)
        return transport

    def _count_handshake(self, transport: asyncio.Transport, waiter: asyncio.Future[Any]) -> None:
        if waiter.done():
            return
        self._handshaking[transport] = None
        waiter.add_done_callback(lambda _: self._handshaking.pop(transport, None))
        while len(self._handshaking) > MAX_HANDSHAKES:
            oldest = next(iter(self._handshaking))
            del self._handshaking[oldest]
            oldest.abort()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive, a bounded pool, and JSON for bad HTTP."""

    _request_timer: asyncio.TimerHandle | None = None
    _waiting_since = 0.0  # loop time since when no request of this connection has been worked on
    _let_go = False  # aborted to make room: going, whatever the loop has yet to tell it

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = self.loop.time()
        if len(self.connections) > MAX_CONNECTIONS and not _make_room(self.connections, self):
            # Each connection holds a socket: past the cap a client flooding the server with connections would
            # exhaust its file descriptors. Every other connection has a request being worked on: wait for one.
            self._refuse(
                503,
                "Service Unavailable",
                "busy",
                f"each of the {MAX_CONNECTIONS} connections the server holds has a request being answered; "
                "retry shortly",
            )
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._waiting_since = self.loop.time()
        super().on_response_complete()

    def _working(self) -> bool:
        """Whether the app is answering a request that arrived whole (a connection that is never let go)."""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete and self.conn.their_state in _ARRIVED

    def _let_go_now(self) -> None:
        """Close at once, with a 503 if a request was awaited or arriving; never one the app is answering."""
        self._let_go = True
        if not self.transport.is_closing() and self._request_timer is not None:
            self._refuse(
                503,
                "Service Unavailable",
                "busy",
                f"the server holds {MAX_CONNECTIONS} connections; this one, waiting longest, made room for another",
            )
        self._disarm()
        # abort, not close: TLS's close waits up to 30 s for the peer's close_notify, a socket held all along.
        try:
            self.transport.abort()
        except AttributeError:
            pass  # asyncio's TLS transport, closed twice, has dropped its protocol: it is going already

    def data_received(self, data: bytes) -> None:
        if self._request_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state in _ARRIVED:
            self._disarm()

    def send_400_response(self, msg: str) -> None:
        # Called by uvicorn inside its `except h11.RemoteProtocolError`: the error says which status fits.
        error = sys.exc_info()[1]
        if isinstance(error, h11.RemoteProtocolError) and error.error_status_hint == 431:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                "headers_too_large",
                f"the request line and headers are limited to {MAX_HEADER_BYTES} bytes",
            )
        else:
            self._refuse(
                400,
                "Bad Request",
                "bad_http",
                "malformed HTTP/1.1 request (a bad request line, header, Content-Length or chunk)",
            )

    def _arm(self) -> None:
        self._disarm()
        self._request_timer = self.loop.call_later(REQUEST_TIMEOUT_S, self._request_timeout)

    def _disarm(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_timeout(self) -> None:
        self._request_timer = None
        if not self.transport.is_closing() and self.conn.their_state not in _ARRIVED:
            self._refuse(
                408,
                "Request Timeout",
                "request_timeout",
                f"the request did not arrive whole within {REQUEST_TIMEOUT_S:g} s",
            )

    def _refuse(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer with the error unless the app's own answer has begun, and close the connection."""
        self._disarm()
        if self.transport.is_closing():
            return
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
        answered = self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)  # e.g. a 413 sent before the body
        if not answered and (cycle is None or not cycle.response_started):
            self.transport.write(error_response(status, reason, code, message))
        if cycle is not None:
            # The app may be waiting for the rest of the body: it now reads a disconnect, and what it
            # sends is dropped (uvicorn ignores sends on a disconnected cycle).
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def _make_room(connections: Iterable[Any], newcomer: GuardedH11Protocol) -> bool:
    """Let go of the connection that has waited longest with no request worked on; False when each has one.

    Idle ones, ones whose request is still arriving and ones closing (each holds its socket until TLS's close
    ends) all qualify: a client hoarding connections pushes out its own oldest before anyone's newer one.
    """
    others = [
        c
        for c in connections
        if c is not newcomer and isinstance(c, GuardedH11Protocol) and not c._let_go and not c._working()
    ]
    if not others:
        return False
    min(others, key=lambda c: c._waiting_since)._let_go_now()
    return True
