"""Fleet commands end near their --timeout whatever a node does: trickle, keep silent, or never finish TLS.

Each stalling node is a real server on loopback that sends a byte just inside
any socket timeout (or nothing at all), forever: only a deadline for the
whole request ends the wait. A real dashboard beside them shows the other
nodes' answers still come, and each stalling node is named in its own error.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuscope.fleet.certs import init_fleet
from tests.serve.support import Server, contention_recording, dashboard

TOKEN = "fleet-deadline-token-0123456789"

TIMEOUT_S = 2
# Generous: start-up, a real node's answer and the deadline; a stalled node held these commands for 300 s and more.
BOUND_S = TIMEOUT_S + 20
TRICKLE_EVERY_S = 0.3
# A whole response's headers, promising a chunked body.
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


@dataclass
class Nodes:
    pki: Path
    alive: Server
    stalling: dict[str, str]  # what the node does -> its address

    def tls(self) -> list[str]:
        return [
            "--ca-cert",
            str(self.pki / "ca.pem"),
            "--client-cert",
            str(self.pki / "client.pem"),
            "--client-key",
            str(self.pki / "client.key"),
        ]

    def every(self) -> str:
        return ",".join([f"127.0.0.1:{self.alive.port}", *self.stalling.values()])


def _trickle(conn: socket.socket, stop: threading.Event, first: bytes) -> None:
    """Send ``first``, then one byte every TRICKLE_EVERY_S until the client goes (or the tests end)."""
    try:
        conn.sendall(first)
        while not stop.wait(TRICKLE_EVERY_S):
            conn.sendall(b"7")
    except OSError:
        pass  # the client gave up: what each test waits for


def _read_request(conn: ssl.SSLSocket) -> None:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("the client went")
        got += chunk


def _node(stop: threading.Event, serve: Callable[[socket.socket], None]) -> tuple[socket.socket, str]:
    """A loopback listener that hands each connection to ``serve`` on its own thread."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                serve(conn)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            conn.settimeout(None)
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, f"127.0.0.1:{listener.getsockname()[1]}"


def _stalling_servers(ctx: ssl.SSLContext, stop: threading.Event) -> dict[str, Callable[[socket.socket], None]]:
    def tls(conn: socket.socket) -> ssl.SSLSocket:
        return ctx.wrap_socket(conn, server_side=True)

    def trickled_body(conn: socket.socket) -> None:
        sock = tls(conn)
        _read_request(sock)
        _trickle(sock, stop, CHUNKED_HEAD + b"100000\r\n")  # a 1 MiB chunk, a byte at a time

    def trickled_headers(conn: socket.socket) -> None:
        sock = tls(conn)
        _read_request(sock)
        _trickle(sock, stop, b"HTTP/1.1 200 OK\r\nX-Slow: ")

    def silent(conn: socket.socket) -> None:
        sock = tls(conn)  # the handshake completes
        _read_request(sock)
        stop.wait()  # and the request is never answered

    def no_handshake(conn: socket.socket) -> None:
        stop.wait()  # accepts over TCP, never says hello back

    def trickled_handshake(conn: socket.socket) -> None:
        # A TLS handshake record promising 16 KiB, sent a byte at a time: every receive gets a byte in time.
        _trickle(conn, stop, b"\x16\x03\x03\x40\x00")

    return {
        "trickled-body": trickled_body,
        "trickled-headers": trickled_headers,
        "silent": silent,
        "no-handshake": no_handshake,
        "trickled-handshake": trickled_handshake,
    }


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("fleet-deadlines")
    pki = root / "pki"
    issued = init_fleet(pki, ["alive", "stalling"], ["127.0.0.1"])
    db = contention_recording(root / "run.db")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*issued.servers["stalling"])
    stop = threading.Event()
    with ExitStack() as stack:
        cert, key = issued.servers["alive"]
        tls = ("--tls-cert", str(cert), "--tls-key", str(key), "--ca-cert", str(issued.ca))
        alive = stack.enter_context(dashboard(db, root / "alive", *tls, env_extra={"GPUSCOPE_TOKEN": TOKEN}))
        stack.callback(stop.set)
        stalling = {}
        for name, serve in _stalling_servers(ctx, stop).items():
            listener, stalling[name] = _node(stop, serve)
            stack.callback(listener.close)
        yield Nodes(pki, alive, stalling)


def _timed(*args: str) -> tuple[float, int, str, str]:
    """Run gpuscope; (seconds it took, exit status, stdout, stderr). One still running past the bound fails."""
    env = dict(os.environ, GPUSCOPE_TOKEN=TOKEN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "gpuscope", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=BOUND_S + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuscope {args[0]} still waiting after {BOUND_S + 10} s")
    return time.monotonic() - t0, p.returncode, p.stdout, p.stderr


def _says_it_was_late(error: str) -> bool:
    return f"no answer within {TIMEOUT_S} s" in error or f"still arriving after {TIMEOUT_S} s" in error


def test_query_nodes_ends_near_its_timeout_and_names_each_stalling_node(nodes: Nodes) -> None:
    # given a live node and nodes that trickle, keep silent or never finish the handshake
    # when a query asks them all with a 2 s limit
    took, rc, out, err = _timed(
        "query", "--nodes", nodes.every(), "--timeout", f"{TIMEOUT_S}s", "--json", *nodes.tls(), "SELECT 1 AS one"
    )
    # then it ends within a bound of the limit, with the live node's rows
    assert took < BOUND_S, took
    assert rc == 0, err
    assert json.loads(out) == [{"node": f"127.0.0.1:{nodes.alive.port}", "one": 1}]
    # and one warning per stalling node, naming it and its lateness
    warnings = {line for line in err.splitlines() if line.startswith("warning: node ")}
    for kind, address in nodes.stalling.items():
        mine = [w for w in warnings if w.startswith(f"warning: node {address}: ")]
        assert len(mine) == 1 and _says_it_was_late(mine[0]), (kind, err)
    assert len(warnings) == len(nodes.stalling), err


def test_nodes_ends_near_its_timeout_and_reports_each_stalling_node_down(nodes: Nodes) -> None:
    took, rc, out, err = _timed("nodes", "--nodes", nodes.every(), "--timeout", f"{TIMEOUT_S}s", "--json", *nodes.tls())
    assert took < BOUND_S, took
    assert rc == 0, err
    by = {r["address"]: r for r in json.loads(out)}
    assert by[f"127.0.0.1:{nodes.alive.port}"]["ok"], by
    for kind, address in nodes.stalling.items():
        assert not by[address]["ok"] and _says_it_was_late(by[address]["error"]), (kind, by[address])


def test_export_nodes_ends_near_its_timeout_with_the_live_nodes_events(nodes: Nodes, tmp_path: Path) -> None:
    out = tmp_path / "job.json"
    took, rc, _, err = _timed(
        "export", "--nodes", nodes.every(), "--timeout", f"{TIMEOUT_S}s", "-o", str(out), *nodes.tls()
    )
    assert took < BOUND_S, took
    assert rc == 0, err
    assert json.loads(out.read_text())["traceEvents"], "the live node's events are in the trace"
    for address in nodes.stalling.values():
        assert f"node {address}" in err, err


@pytest.mark.parametrize("command", ["nodes", "query"])
def test_a_timeout_of_zero_is_refused_in_one_line(nodes: Nodes, command: str) -> None:
    # given a node that never finishes its handshake, and no limit asked for
    sql = ["SELECT 1"] if command == "query" else []
    took, rc, out, err = _timed(
        command, "--nodes", nodes.stalling["no-handshake"], "--timeout", "0", *nodes.tls(), *sql
    )
    # then the command refuses at once, where it waited for that node without end
    assert took < BOUND_S, took
    assert rc == 2 and out == ""
    assert err.startswith("error: --timeout 0: a node must answer within a time limit"), err
    assert "Traceback" not in err
