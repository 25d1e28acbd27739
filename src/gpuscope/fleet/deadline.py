"""One deadline for a whole request to a node: name lookup, connection, TLS handshake, headers and body.

A socket timeout bounds each wait for bytes, not the request: a node that
sends one byte just inside every timeout (a trickled handshake, trickled
headers, a chunked body a byte at a time) held a request for minutes against
a 5 s limit. Here a ``Watchdog`` shuts the connection's socket down when the
deadline comes, whatever the request is waiting for: the blocked receive
returns at once, and the caller reports the node as late.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

# getaddrinfo's answer: (family, type, proto, canonname, sockaddr).
_AddressInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


class Watchdog:
    """Shuts down the socket it was given when ``deadline`` (``time.monotonic()``) passes; ``fired`` says it did.

    It holds a duplicate of the socket's descriptor, so the connection may
    close its own at any time (TLS wraps and replaces the socket object) and
    the watchdog never acts on a descriptor number reused by another file.
    ``shutdown`` acts on the socket itself, which every duplicate shares.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer: threading.Timer | None = None
        self._closed = False

    def left_s(self) -> float:
        """Seconds until the deadline; raises TimeoutError once it has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def create_connection(self, address: tuple[str, int], *_: Any) -> socket.socket:
        """``socket.create_connection`` within the deadline, the socket then watched (http.client's hook)."""
        sock = connect_within(address, self)
        with self._lock:
            if self._closed:
                sock.close()
                raise TimeoutError
            self._sock = sock.dup()
            self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._fire)
            self._timer.daemon = True
            self._timer.start()
        return sock

    def _fire(self) -> None:
        with self._lock:
            if self._sock is None:
                return
            self.fired = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the node

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def connect_within(address: tuple[str, int], watchdog: Watchdog) -> socket.socket:
    """A connected TCP socket to ``address``, the lookup and every attempt within the deadline.

    Its timeout is the time left: each later wait is bounded by it, and the
    watchdog bounds them all together.
    """
    host, port = address
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in _resolve(host, port, watchdog.left_s()):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(watchdog.left_s())
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # as http.client: not every socket has it
        return sock
    raise last if last is not None else OSError(f"{host}: no address to connect to")


def _resolve(host: str, port: int, timeout_s: float) -> list[_AddressInfo]:
    """getaddrinfo, given up on after ``timeout_s`` (a resolver that does not answer waits its own, longer, time)."""
    found: list[_AddressInfo] = []
    failed: list[OSError] = []

    def ask() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except OSError as exc:
            failed.append(exc)

    # A daemon thread: one that is given up on ends with the resolver's own timeout, and never holds up exit.
    asking = threading.Thread(target=ask, name="gpuscope-resolve", daemon=True)
    asking.start()
    asking.join(timeout_s)
    if asking.is_alive():
        raise TimeoutError
    if failed:
        raise failed[0]
    return found
