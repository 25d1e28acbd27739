"""Raw HTTP/1.1 over real TLS for the hostile-input corpus: requests as bytes, answers parsed, the server's log kept."""

from __future__ import annotations

import io
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

from tests.serve.support import Server, dashboard

# What a server must never print, whatever it was sent: a traceback, or uvicorn's note that the app raised.
LOG_FAILURES = ("Traceback", "Exception in ASGI application", "Internal Server Error")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ServerLog:
    """The server's stderr, read by a thread as it is written (a full pipe would stall the server)."""

    lines: list[str] = field(default_factory=list)

    def failures(self) -> list[str]:
        return [line for line in self.lines if any(f in line for f in LOG_FAILURES)]


@contextmanager
def logged_dashboard(db: Path, home: Path, *extra: str) -> Iterator[tuple[Server, ServerLog]]:
    """``support.dashboard`` with its stderr collected into a ServerLog."""
    log = ServerLog()
    with dashboard(db, home, *extra) as server:
        assert server.proc.stderr is not None
        stderr = server.proc.stderr

        def drain() -> None:
            for line in stderr:
                log.lines.append(line)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        yield server, log
    reader.join(timeout=15)


def tls_socket(server: Server, *, timeout_s: float = 30.0) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s)
    return server.context().wrap_socket(sock, server_hostname="localhost")


def read_to_close(conn: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection (or the socket's timeout passes)."""
    out = b""
    try:
        while chunk := conn.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionError, ssl.SSLError):
        pass
    return out


def exchange(server: Server, data: bytes, *, timeout_s: float = 30.0) -> Answer | None:
    """Send ``data`` as it is and read the answer; None when the server closes without one."""
    conn = tls_socket(server, timeout_s=timeout_s)
    try:
        try:
            conn.sendall(data)
        except (ConnectionError, ssl.SSLError):
            pass  # refused mid-request: what it answered before closing is still read
        return parse(read_to_close(conn))
    finally:
        conn.close()


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, *args: Any, **kwargs: Any) -> io.BytesIO:
        return io.BytesIO(self.data)


def parse(raw: bytes) -> Answer | None:
    """The first HTTP response in ``raw`` (chunked bodies decoded); None for no bytes at all."""
    if not raw:
        return None
    res = HTTPResponse(_Bytes(raw))  # type: ignore[arg-type]
    res.begin()
    return Answer(res.status, {k.lower(): v for k, v in res.getheaders()}, res.read())


def request(
    server: Server,
    method: str,
    target: str | bytes,
    *,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
    host: str = "127.0.0.1",
    token: bool = True,
    length: bool = True,
) -> bytes:
    """A whole request as bytes: request line, Host, Bearer token, the ``headers``, Content-Length, close."""
    lines = [method.encode() + b" " + (target if isinstance(target, bytes) else target.encode()) + b" HTTP/1.1"]
    lines.append(b"Host: " + host.encode())
    if token:
        lines.append(b"Authorization: Bearer " + server.token.encode())
    for name, value in headers or []:
        lines.append(name.encode("latin-1") + b": " + value.encode("latin-1"))
    if length:
        lines.append(b"Content-Length: %d" % len(body))
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def assert_error(answer: Answer | None, status: int, code: str | None = None) -> dict[str, str]:
    """``answer`` is the API's one error shape with ``status`` (and ``code``): one line, no traceback."""
    assert answer is not None, "the server closed the connection without an answer"
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers.get("content-type", "").startswith("application/json"), answer.headers
    doc = answer.json()
    assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}, doc
    error: dict[str, str] = doc["error"]
    assert code is None or error["code"] == code, error
    assert "\n" not in error["message"] and "Traceback" not in error["message"], error
    return error
