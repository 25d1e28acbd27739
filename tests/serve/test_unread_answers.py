"""Clients that pipeline requests and never read the answers, against a real dashboard over real TLS (and plain).

Such a client fills the server's write buffers: the server stops writing to it and, behind it, stops reading
its next requests. Nothing else ever ended such a connection, and each held a slot of the pool (and, with the
token, one of the requests the server works on at once) for good: enough of them locked everyone out.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from gpuscope.serve.protocol import MAX_CONNECTIONS, WRITE_TIMEOUT_S, GuardedH11Protocol, _make_room
from tests.serve.hostile import ServerLog, logged_dashboard
from tests.serve.support import Server, contention_recording, dashboard

# Generous: a stalled connection is closed between one and two WRITE_TIMEOUT_S after it stalls; the bound
# only catches "never" (before, such a connection was held for as long as its client liked).
CLOSE_BOUND_S = WRITE_TIMEOUT_S * 6
# Rows of about 330 bytes of JSON each, made by SQLite itself: an answer of a thousand (330 kB) takes milliseconds,
# and a few fill every buffer between the server and a client that reads nothing.
ROWS = 1000
# The client's receive buffer and segment size (an Internet link's, not loopback's 64 KiB): the kernels hold
# little of what the server sends, as they would for a client across a network.
CLIENT_RCVBUF = 8192
CLIENT_MSS = 1460
# Connections opened at once for the pool: they stall together, short of the 128 requests worked on at once
# (past it a request is refused at once, a small answer that fills nothing).
BATCH = 32
TCP_ESTABLISHED = 1  # linux/tcp_states.h


@pytest.fixture(scope="module")
def served_and_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, ServerLog]]:
    root = tmp_path_factory.mktemp("unread-answers")
    with logged_dashboard(contention_recording(root / "run.db"), root / "home") as pair:
        yield pair


@pytest.fixture(scope="module")
def served_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("unread-answers-plain")
    with dashboard(contention_recording(root / "run.db"), root / "home", "--no-tls") as server:
        yield server


@pytest.fixture(scope="module")
def served(served_and_log: tuple[Server, ServerLog]) -> Server:
    return served_and_log[0]


def _pipelined(server: Server, *, token: bool, count: int, rows: int) -> bytes:
    """``count`` requests in a row, kept alive: queries answering ``rows`` rows with the token, 401s without."""
    if token:
        sql = (
            f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT {rows}) "
            "SELECT x, printf('%.300c', 'y') FROM c"
        )
        body = json.dumps({"sql": sql, "limit": rows}).encode()
        head = (
            "POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return (head.encode() + body) * count
    return b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * count


def _never_reading(server: Server, *, token: bool, count: int, rows: int = ROWS, tls: bool = True) -> socket.socket:
    """A TLS connection (or a plain one) that sends ``count`` pipelined requests and will never read an answer."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connecting: they set the window and the segment size the connection starts with.
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, CLIENT_MSS)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", server.port))
    conn = server.context().wrap_socket(raw, server_hostname="localhost") if tls else raw
    conn.settimeout(5)
    try:
        conn.sendall(_pipelined(server, token=token, count=count, rows=rows))
    except (TimeoutError, OSError):
        pass  # the server stopped reading before the last requests: they wait in the buffers, as intended
    return conn


def _open(conn: socket.socket) -> bool:
    """Whether the server still holds the connection, without reading from it (reading would let it drain)."""
    state = struct.unpack("B", conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0]
    return bool(state == TCP_ESTABLISHED)


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def _settled(server: Server, bound_s: float) -> None:
    """Wait until the server has done all it can for its clients: its CPU time stops growing."""
    deadline = time.monotonic() + bound_s
    before = _cpu_ticks(server.proc.pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _cpu_ticks(server.proc.pid)
        if now - before <= 1:  # clock ticks (10 ms): idle but for its own housekeeping
            return
        before = now


@pytest.mark.parametrize("token", [True, False], ids=["big-answers", "401s"])
def test_a_client_that_pipelines_and_never_reads_is_closed_within_the_write_deadline(
    served: Server, token: bool
) -> None:
    # given a connection that pipelined requests (big answers, or 401s without the token) and reads nothing
    conn = _never_reading(served, token=token, count=6 if token else 4000)
    started = time.monotonic()
    try:
        # when it keeps not reading
        while _open(conn) and time.monotonic() - started < CLOSE_BOUND_S:
            time.sleep(0.2)
        held_s = time.monotonic() - started
        # then the server let it go within the bound, where it held it for good
        assert not _open(conn), f"still held after {held_s:.0f} s"
    finally:
        conn.close()
    # and it serves others still
    status, doc = served.get_json("/api/v1/time")
    assert status == 200 and doc["timestamp_ns"] > 0


def test_a_plain_http_client_that_never_reads_its_one_big_answer_is_closed(served_plain: Server) -> None:
    # given `--no-tls` (loopback) and one request for an answer of about 1 MB, never read: a plain socket closed
    # with bytes unsent (the idle keep-alive's close) waits for them to go
    conn = _never_reading(served_plain, token=True, count=1, rows=3 * ROWS, tls=False)
    started = time.monotonic()
    try:
        # when it keeps not reading
        while _open(conn) and time.monotonic() - started < CLOSE_BOUND_S:
            time.sleep(0.2)
        # then the server let it go within the bound, where it held it for good
        assert not _open(conn), f"still held after {time.monotonic() - started:.0f} s"
    finally:
        conn.close()


def test_a_pipelining_client_that_reads_slowly_gets_every_answer(served: Server) -> None:
    # given a connection that pipelined two queries of about 1 MB each before reading
    rows = 3 * ROWS
    conn = _never_reading(served, token=True, count=2, rows=rows)
    conn.settimeout(CLOSE_BOUND_S)
    got = b""
    try:
        # when it reads them slowly, two TLS records (32 KiB) every quarter second: longer than the write
        # deadline in all, but it takes some all along
        while len(answers := _answers(got)) < 2:
            for _ in range(2):
                chunk = conn.recv(16384)
                assert chunk, f"closed after {len(got)} bytes"
                got += chunk
            time.sleep(0.25)
    finally:
        conn.close()
    # then both answers came, whole
    assert [status for status, _ in answers] == [200, 200]
    assert [len(json.loads(body)["rows"]) for _, body in answers] == [rows, rows]


def _answers(data: bytes) -> list[tuple[int, bytes]]:
    """The whole responses at the start of ``data``: status and body (each has a Content-Length)."""
    out = []
    while b"\r\n\r\n" in data:
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        if len(rest) < length:
            break
        out.append((int(head.split(b" ", 2)[1]), rest[:length]))
        data = rest[length:]
    return out


def test_connections_that_never_read_past_the_cap_make_room_for_a_client_with_the_token(
    served_and_log: tuple[Server, ServerLog],
) -> None:
    served, log = served_and_log
    # given more connections than the pool holds, each pipelining big queries and reading nothing
    held: list[socket.socket] = []
    try:
        while len(held) < MAX_CONNECTIONS + 44:
            held += [_never_reading(served, token=True, count=6) for _ in range(BATCH)]
            _settled(served, CLOSE_BOUND_S)  # they have stalled: all the server could write to them is written
        # when a client with the token asks
        status, doc = served.get_json("/api/v1/time")
    finally:
        for conn in held:
            conn.close()
    # then it is answered, where each slot was held by a request whose answer nobody read (503 busy)
    assert status == 200 and doc["timestamp_ns"] > 0, (status, doc)
    assert log.failures() == [], "".join(log.lines[-40:])


# -- which connection makes room --------------------------------------------------------------------------------------


class _Transport:
    """What the write deadline reads of a transport: its unsent bytes; and whether it was aborted."""

    def __init__(self) -> None:
        self.unsent = 300_000
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def test_the_write_deadline_spares_a_client_that_takes_some_and_closes_one_that_takes_none() -> None:
    # The kernel under a real connection buffers megabytes, so a slow reader over loopback rarely keeps the server
    # waiting a whole period: the rule itself, on a transport whose unsent bytes the test sets.
    loop = asyncio.new_event_loop()
    try:
        held = GuardedH11Protocol.__new__(GuardedH11Protocol)  # no server: only the deadline's state
        transport = _Transport()
        held.loop, held.transport, held.flow = loop, transport, FlowControl(transport)  # type: ignore[assignment, arg-type]
        # given a connection whose writing paused
        held.pause_writing()
        # when its client took a segment in the first period, then nothing in the next
        transport.unsent -= 1460
        held._write_timeout()
        spared = not transport.aborted
        held._write_timeout()
        # then it was given the second period, and closed at its end
        assert spared and transport.aborted
    finally:
        loop.close()


class _Held(GuardedH11Protocol):
    """A pooled connection reduced to what the choice reads: since when it waits, since when its answer stalls."""

    def __init__(self, name: str, waiting_since: float, stalled_since: float | None, *, working: bool) -> None:
        self.name = name
        self._waiting_since = waiting_since
        self._stalled_since = stalled_since
        self.working = working
        self.let_go: list[str] = []

    def _working(self) -> bool:
        return self.working

    def _let_go_now(self) -> None:
        self.let_go.append(self.name)
        self._let_go = True


def _chosen(*names: str) -> str | None:
    """Which of a pool of these connections makes room for a newcomer (None: it is refused)."""
    kinds = {
        "idle": lambda: _Held("idle", 1.0, None, working=False),  # waiting longest
        "answering": lambda: _Held("answering", 2.0, None, working=True),
        "stalled": lambda: _Held("stalled", 50.0, 60.0, working=False),  # stalled longest
        "stalled-mid-answer": lambda: _Held("stalled-mid-answer", 40.0, 70.0, working=True),
    }
    pool = [kinds[name]() for name in names]
    newcomer = _Held("new", 100.0, None, working=False)
    if not _make_room([*pool, newcomer], newcomer):
        return None
    (chosen,) = [c.name for c in pool if c.let_go]
    return chosen


def test_a_stalled_answer_makes_room_before_an_idle_connection() -> None:
    assert _chosen("idle", "answering", "stalled", "stalled-mid-answer") == "stalled"
    assert _chosen("idle", "answering", "stalled-mid-answer") == "stalled-mid-answer"
    assert _chosen("idle", "answering") == "idle"
    assert _chosen("answering") is None
