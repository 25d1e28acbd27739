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

Answers must be read. A client that pipelines requests and never reads the
answers fills the connection's buffers: past ``WRITE_HIGH_WATER`` unsent bytes
the server stops writing to it, its next pipelined request waits (not worked
on, so it holds none of the requests the server works on at once) and the
connection is first in line when the pool makes room. A connection with more
than ``WRITE_LOW_WATER`` bytes unsent whose client takes none of them for
``WRITE_TIMEOUT_S`` is closed with a reset, and what it never read is
discarded, in the kernel too.

What h11 refuses (control characters in a header, two Content-Lengths, bad
chunks, headers over ``MAX_HEADER_BYTES`` while they arrive) is answered in
the one error shape of the API instead of uvicorn's plain text, with nothing
of the request in it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
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
# A connection whose client takes none of its unsent answers for this long is closed. A client on a slow link
# takes some bytes every second; one that reads nothing would hold its connection, and the memory of its answers,
# for as long as it liked. What a client is given to send a request, it is given to take some of an answer.
WRITE_TIMEOUT_S = REQUEST_TIMEOUT_S
# Unsent bytes past which a connection is not written to (its next pipelined request waits), and under which it
# is again: asyncio's marks for a socket, also for TLS, whose layer would otherwise queue 512 KiB of its own above
# the socket's. The write deadline watches a connection while more than the low mark is unsent.
WRITE_HIGH_WATER = 64 * 1024
WRITE_LOW_WATER = WRITE_HIGH_WATER // 4
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
    _write_timer: asyncio.TimerHandle | None = None
    _stalled_since: float | None = None  # loop time since when writing is paused and the client has taken nothing
    _unsent_seen = 0  # the unsent bytes when the write deadline's period began
    _next_held = False  # an answer ended while writing was paused: the next pipelined request waits for the drain

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = self.loop.time()
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
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
        self._disarm_write()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._waiting_since = self.loop.time()
        self._watch_unsent()  # an answer was added: the client's period starts from what is unsent now
        if self.flow.write_paused and not self.transport.is_closing():
            # The client has not taken what was written: its next pipelined request is not worked on (an answer
            # into a buffer nobody reads, holding one of the requests the server works on at once) until it does.
            self._next_held = True
            return
        super().on_response_complete()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stalled_since = self.loop.time()
        self._watch_unsent()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stalled_since = None
        self._watch_unsent()  # the client took some; under TLS the socket's transport may still hold much
        if self._next_held:
            self._next_held = False
            # Soon, not now: the transport calls this from inside its own write path.
            self.loop.call_soon(super().on_response_complete)

    def _working(self) -> bool:
        """Whether the app is answering a request that arrived whole (a connection that is never let go)."""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete and self.conn.their_state in _ARRIVED

    def _let_go_now(self) -> None:
        """Close at once, with a 503 if a request was awaited or arriving; never one the app is answering,
        unless its client reads nothing of it."""
        self._let_go = True
        if not self.transport.is_closing() and self._request_timer is not None:
            self._refuse(
                503,
                "Service Unavailable",
                "busy",
                f"the server holds {MAX_CONNECTIONS} connections; this one, waiting longest, made room for another",
            )
        self._abort(discard=self._stalled_since is not None)

    def _abort(self, *, discard: bool) -> None:
        """Close at once; with ``discard``, what the client has not taken is dropped by the kernel too (a reset)."""
        self._let_go = True
        self._disarm()
        self._disarm_write()
        sock = self.transport.get_extra_info("socket")
        if discard and sock is not None:
            # Else the kernel keeps the unread bytes after the close, and retries a client that reads nothing
            # for minutes.
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass  # gone already
        # abort, not close: TLS's close waits up to 30 s for the peer's close_notify, a socket held all along,
        # and a plain socket's close waits for the unsent bytes to go, forever for a client that reads nothing.
        try:
            self.transport.abort()
        except AttributeError:
            pass  # asyncio's TLS transport, closed twice, has dropped its protocol: it is going already

    def _unsent(self) -> int:
        """The bytes written that the kernel has not taken yet: they shrink only as the client reads."""
        size = self.transport.get_write_buffer_size()
        # asyncio's TLS transport counts what its TLS layer holds, not what it has passed to the socket's own
        # transport beneath (Python 3.11 on; before, it counts only the latter: counted twice, it still shrinks).
        below = getattr(getattr(self.transport, "_ssl_protocol", None), "_transport", None)
        if isinstance(below, asyncio.WriteTransport):
            size += below.get_write_buffer_size()
        return size

    def _watch_unsent(self) -> None:
        """Start the write deadline's period afresh from the bytes unsent now, if more than the low mark."""
        self._disarm_write()
        self._unsent_seen = self._unsent()
        if self._unsent_seen > WRITE_LOW_WATER and not self._let_go:
            # Not only while writing is paused: a plain socket closed with bytes unsent (after its answer, or an
            # idle keep-alive) waits for them to go, forever for a client that reads nothing.
            self._write_timer = self.loop.call_later(WRITE_TIMEOUT_S, self._write_timeout)

    def _disarm_write(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timeout(self) -> None:
        self._write_timer = None
        unsent = self._unsent()
        if self._let_go or unsent <= WRITE_LOW_WATER:
            return  # gone, or the client took (nearly) all
        if unsent < self._unsent_seen:  # it took some: a slow client, given another period
            if self._stalled_since is not None:
                self._stalled_since = self.loop.time()
            self._watch_unsent()
            return
        self._abort(discard=True)

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
    """Let go of a connection whose client does not read, else of the one that has waited longest with no request
    worked on; False when each has one being worked on and read.

    Idle ones, ones whose request is still arriving and ones closing (each holds its socket until TLS's close
    ends) all qualify: a client hoarding connections pushes out its own oldest before anyone's newer one.
    Stalled ones come first (the longest stalled first), even mid-answer: their client takes nothing, and what
    they hold unsent is the server's memory.
    """
    others = [
        c
        for c in connections
        if c is not newcomer
        and isinstance(c, GuardedH11Protocol)
        and not c._let_go
        and (c._stalled_since is not None or not c._working())
    ]
    if not others:
        return False
    min(others, key=_room_order)._let_go_now()
    return True


def _room_order(c: GuardedH11Protocol) -> tuple[int, float]:
    if c._stalled_since is not None:
        return 0, c._stalled_since
    return 1, c._waiting_since
