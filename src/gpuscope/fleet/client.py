"""Ask many nodes' `gpuscope dashboard` APIs at once: parallel, bounded, over (mutual) TLS, never hiding a failure.

Each node gets its own request on a thread, a deadline (``timeout_s``) for the
whole request (name lookup, connection, TLS handshake, headers and body, kept
by a watchdog that shuts the socket down: see ``deadline``), and a cap on the
bytes it may send back. A node that is down, slow, refuses the
handshake or answers with an error becomes a ``NodeResult`` with ``error``
set: callers print one warning per failed node and go on with the others.
"""

from __future__ import annotations

import copy
import json
import os
import ssl
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException, HTTPSConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

from gpuscope.config import fleet_files, fleet_nodes
from gpuscope.errors import UsageError
from gpuscope.fleet import CLOCK_SAMPLES
from gpuscope.fleet.deadline import Watchdog
from gpuscope.platform.files import require_private
from gpuscope.platform.net import is_loopback, split_host_port

DEFAULT_TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH: trusted, but issued for another name.
_NAME_MISMATCH = (62, 64)


@dataclass(frozen=True, slots=True)
class Node:
    """A node's API address: ``host:port`` (``[v6]:port``)."""

    host: str
    port: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @classmethod
    def parse(cls, text: str) -> Node:
        address = split_host_port(text)
        if address is None or not address[0]:
            raise UsageError(
                f"--nodes {text.strip()!r}: expected HOST:PORT", remedy="e.g. --nodes gpu-1:8080,gpu-2:8080"
            )
        return cls(*address)


def parse_nodes(text: str | Sequence[str]) -> list[Node]:
    """``a:8080,b:8080`` (or a list of such) -> nodes, in order, duplicates removed; raises UsageError."""
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    nodes = list(dict.fromkeys(Node.parse(t) for t in items if t.strip()))
    if not nodes:
        raise UsageError("--nodes: no node given", remedy="e.g. --nodes gpu-1:8080,gpu-2:8080")
    return nodes


@dataclass(frozen=True, slots=True)
class FleetTls:
    """Client-side TLS: the CA that signed the nodes' certificates, and this client's certificate and key."""

    ca_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    plain_http: bool = False  # only with --insecure-http: never the default

    def context(self) -> ssl.SSLContext:
        """A TLS 1.3 client context; raises UsageError for unreadable files or a key others can read."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert) if self.ca_cert else None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        if bool(self.client_cert) != bool(self.client_key):
            raise UsageError("--client-cert and --client-key go together")
        if self.client_cert and self.client_key:
            require_private(self.client_key, "--client-key")
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(f"--client-cert/--client-key: cannot load: {exc}") from None
        return ctx


@dataclass(frozen=True, slots=True)
class NodeResult:
    node: Node
    data: Any = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class FleetClient:
    """Requests to every node in parallel; one ``NodeResult`` per node, in the nodes' order."""

    def __init__(
        self,
        nodes: Sequence[Node],
        tls: FleetTls = FleetTls(),
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if tls.plain_http is False:
            self.ctx: ssl.SSLContext | None = tls.context()
        else:
            remote = [n.address for n in nodes if not n.loopback]
            if remote:
                raise UsageError(
                    f"--insecure-http to {', '.join(remote)}: plain HTTP beyond this machine sends data in clear",
                    remedy="use HTTPS (the dashboard's default) with --ca-cert",
                )
            self.ctx = None
        self.nodes = list(nodes)
        self.token = token if token is not None else os.environ.get("GPUSCOPE_TOKEN") or None
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    def only(self, addresses: Collection[str]) -> FleetClient:
        """The same client (TLS, token, limits), asking only the nodes at these addresses."""
        other = copy.copy(self)
        other.nodes = [n for n in self.nodes if n.address in addresses]
        return other

    def get(self, path: str) -> list[NodeResult]:
        return self._each(lambda node: self._request(node, "GET", path, None))

    def post(self, path: str, body: dict[str, Any]) -> list[NodeResult]:
        payload = json.dumps(body).encode()
        return self._each(lambda node: self._request(node, "POST", path, payload))

    def one(self, node: Node, method: str, path: str, body: dict[str, Any] | None = None) -> NodeResult:
        """One request to one node (paging through a node's answer)."""
        return self._request(node, method, path, json.dumps(body).encode() if body is not None else None)

    def clock(self, samples: int = CLOCK_SAMPLES) -> list[NodeResult]:
        """Each node's clock offset, NTP-style: ``data`` = {clock_offset_ns, rtt_ns, uncertainty_ns, samples}."""
        return self._each(lambda node: self._clock(node, samples))

    def _each(self, call: Callable[[Node], NodeResult]) -> list[NodeResult]:
        with ThreadPoolExecutor(max_workers=min(64, max(1, len(self.nodes)))) as pool:
            return list(pool.map(call, self.nodes))

    def _connection(self, node: Node, watchdog: Watchdog) -> HTTPConnection:
        """A connection to ``node`` whose every wait ends by the watchdog's deadline."""
        conn: HTTPConnection
        if self.ctx is None:
            conn = HTTPConnection(node.host, node.port, timeout=self.timeout_s)
        else:
            conn = HTTPSConnection(node.host, node.port, timeout=self.timeout_s, context=self.ctx)
        # http.client's own hook for making the socket (HTTPS wraps what it returns): the lookup and the
        # connection within the deadline, and the socket handed to the watchdog before the handshake starts.
        conn._create_connection = watchdog.create_connection  # type: ignore[attr-defined]
        return conn

    def _request(self, node: Node, method: str, path: str, body: bytes | None) -> NodeResult:
        t0 = time.monotonic()
        watchdog = Watchdog(t0 + self.timeout_s)
        try:
            data = self._exchange(self._connection(node, watchdog), watchdog, node, method, path, body)
        except _NodeError as exc:
            return NodeResult(node, error=str(exc), elapsed_s=time.monotonic() - t0)
        finally:
            watchdog.close()
        return NodeResult(node, data=data, elapsed_s=time.monotonic() - t0)

    def _exchange(
        self, conn: HTTPConnection, watchdog: Watchdog, node: Node, method: str, path: str, body: bytes | None
    ) -> Any:
        headers = {"Accept": "application/json", "Host": node.address}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        res = None
        try:
            conn.request(method, path, body=body, headers=headers)
            res = conn.getresponse()
            raw = _read_capped(res, self.max_bytes, watchdog.deadline)
        except (OSError, HTTPException) as exc:
            # Past the deadline the watchdog shut the socket: whatever broke (an end of stream mid-chunk,
            # a reset, a TLS error), the node was too slow.
            late = watchdog.fired or isinstance(exc, TimeoutError)
            raise _NodeError(self._late(res is not None) if late else self._failure(exc, node)) from None
        finally:
            conn.close()
        try:
            doc = json.loads(raw)
        except ValueError:
            if watchdog.fired:  # a body that ends with the connection, cut at the deadline
                raise _NodeError(self._late(True)) from None
            raise _NodeError(f"answered HTTP {res.status} with something that is not JSON") from None
        if res.status != 200:
            err = doc.get("error", {}) if isinstance(doc, dict) else {}
            raise _NodeError(f"HTTP {res.status}: {err.get('message') or err.get('code') or res.reason}")
        return doc

    def _late(self, answering: bool) -> str:
        """The deadline passed: before the answer's headers came, or while its body still arrived."""
        if answering:
            return f"its answer was still arriving after {self.timeout_s:g} s (the time limit)"
        return f"no answer within {self.timeout_s:g} s"

    def _failure(self, exc: BaseException, node: Node) -> str:
        """A network or TLS failure talking to a node, as the one line the user sees."""
        if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_code in _NAME_MISMATCH:
            return (
                f"its certificate does not name {node.host} (the address asked): reach it by a name its certificate "
                f"has, or issue certificates that name it (gpuscope certs init FOLDER --nodes ... --also-name "
                f"{node.host}; an existing CA is kept)"
            )
        if isinstance(exc, ssl.SSLCertVerificationError):
            return f"its certificate is not trusted ({exc.verify_message}; see --ca-cert)"
        if isinstance(exc, ssl.SSLError):
            return f"TLS failed ({exc.reason or exc}); a client certificate may be required"
        if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
            return self._late(False)
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused (no gpuscope dashboard there?)"
        if isinstance(exc, (RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
            # TLS 1.3: a server that refuses our certificate (or its absence) hangs up after the handshake.
            hint = "; it may require a client certificate (--client-cert)" if self.ctx is not None else ""
            return f"closed the connection without answering{hint}"
        return f"{type(exc).__name__}: {exc}".rstrip(": ")

    def _clock(self, node: Node, samples: int) -> NodeResult:
        t_start = time.monotonic()
        offsets, rtts = [], []
        for _ in range(max(3, samples)):
            # Each sample is a whole request under the deadline, its connection and handshake included.
            watchdog = Watchdog(time.monotonic() + self.timeout_s)
            conn = self._connection(node, watchdog)
            try:
                try:
                    conn.connect()  # the handshake is not part of the round trip being timed
                except OSError as exc:
                    conn.close()
                    late = watchdog.fired or isinstance(exc, TimeoutError)
                    error = self._late(False) if late else self._failure(exc, node)
                    return NodeResult(node, error=error, elapsed_s=time.monotonic() - t_start)
                t1 = time.time_ns()
                try:
                    doc = self._exchange(conn, watchdog, node, "GET", "/api/v1/time", None)
                except _NodeError as exc:
                    return NodeResult(node, error=str(exc), elapsed_s=time.monotonic() - t_start)
            finally:
                watchdog.close()
            t2 = time.time_ns()
            remote = doc.get("timestamp_ns") if isinstance(doc, dict) else None
            if not isinstance(remote, int):
                return NodeResult(
                    node, error="GET /api/v1/time gave no timestamp_ns", elapsed_s=time.monotonic() - t_start
                )
            offsets.append(remote - (t1 + (t2 - t1) // 2))
            rtts.append(t2 - t1)
        # NTP's clock filter: the exchange with the shortest round trip. Its offset is off by at most half
        # that round trip, wherever in it the node read its clock; a median of offsets taken over slower
        # exchanges (a loaded node answers in milliseconds) was off by as much as they were slow.
        best = min(range(len(rtts)), key=rtts.__getitem__)
        rtt = rtts[best]
        data = {
            "clock_offset_ns": offsets[best],
            "rtt_ns": rtt,
            "uncertainty_ns": rtt // 2,
            "samples": len(offsets),
        }
        return NodeResult(node, data=data, elapsed_s=time.monotonic() - t_start)


class _NodeError(Exception):
    """One node's failure, as the one line the user sees."""


def _read_capped(res: Any, cap: int, deadline: float) -> bytes:
    """The body, refusing more than ``cap`` bytes and stopping at ``deadline``.

    A read blocked on a node that trickles is ended by the watchdog shutting the socket down at the deadline.
    """
    chunks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = res.read(min(65536, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise _NodeError(f"answered more than {cap:,} bytes (the response cap)")


def configured_client(
    nodes: str | None = None,
    *,
    ca_cert: Path | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    plain_http: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> FleetClient:
    """A client for ``nodes``, else the config file's ``[fleet]`` nodes; each TLS file given wins over the config's.

    Raises UsageError when no node is named anywhere, or for bad addresses or TLS files.
    """
    text = nodes or ",".join(fleet_nodes())
    if not text:
        raise UsageError(
            "no fleet: no --nodes, and no [fleet] nodes in the config file", remedy='add nodes = ["gpu-1:8080", …]'
        )
    files = fleet_files()
    tls = FleetTls(
        ca_cert=ca_cert or files.get("ca_cert"),
        client_cert=client_cert or files.get("client_cert"),
        client_key=client_key or files.get("client_key"),
        plain_http=plain_http,
    )
    return FleetClient(parse_nodes(text), tls, timeout_s=timeout_s)
