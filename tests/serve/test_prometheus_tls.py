"""``/metrics`` beyond loopback: HTTPS (TLS 1.3) with a bearer token, against real TLS clients and a real Prometheus.

The server is the one ``trace --prometheus`` starts, over a stand-in
session (no tracing needed); certificates are made by ``gpuscope.fleet.certs``.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from gpuscope.agent.live_stats import LiveStats
from gpuscope.exporters.metrics import TraceCollector, TraceMetrics
from gpuscope.exporters.metrics_server import MetricsServer, serve_metrics
from gpuscope.fleet.certs import Issued, init_fleet
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.platform.tls import server_context
from tests.prometheus_server import prometheus_server, query

TOKEN = "scrape-token-of-some-length-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Issued:
    return init_fleet(tmp_path_factory.mktemp("pki"), ["localhost"], ["127.0.0.1"])


def _collector() -> TraceCollector:
    hist = LatencyHistogram.empty()
    hist.add(np.array([1_000, 2_000, 3_000, 4_000, 5_000, 6_000], dtype=np.int64))
    stats = LiveStats(per_op={int(Op.cudaMalloc): hist}, events=6)
    return TraceCollector(TraceMetrics("gpu-1", lambda: stats, dict))


@contextmanager
def _served(pki: Issued, *, mutual: bool = False, host: str = "127.0.0.1") -> Iterator[MetricsServer]:
    cert, key = pki.servers["localhost"]
    tls = server_context(cert, key, client_ca=pki.ca if mutual else None)
    server = serve_metrics(_collector(), host, 0, tls=tls, token=TOKEN)
    try:
        yield server
    finally:
        server.close()


def _client(pki: Issued, *, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        ctx.load_cert_chain(*pki.client)
    return ctx


def _get(port: int, ctx: ssl.SSLContext, token: str | None) -> tuple[int, dict[str, str], bytes, str]:
    """(status, headers, body, TLS version) of ``GET /metrics``."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token is not None else {})
        version = str(conn.sock.version()) if isinstance(conn.sock, ssl.SSLSocket) else ""
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read(), version
    finally:
        conn.close()


def test_a_scrape_with_the_token_gets_the_metrics_over_tls_1_3(pki: Issued) -> None:
    with _served(pki) as server:
        status, _, body, version = _get(server.port, _client(pki), TOKEN)
    assert status == 200 and version == "TLSv1.3"
    assert 'gpuscope_calls_total{node="gpu-1",op="cudaMalloc",source="cuda"} 6.0' in body.decode()


@pytest.mark.parametrize("token", [None, "", "scrape-token-of-some-length-0123456780"])
def test_a_scrape_without_the_token_gets_401(pki: Issued, token: str | None) -> None:
    with _served(pki) as server:
        status, headers, body, _ = _get(server.port, _client(pki), token)
    assert status == 401
    assert headers["www-authenticate"].startswith("Bearer")
    assert json.loads(body)["error"]["code"] == "unauthorized"
    assert b"gpuscope_calls" not in body


def test_plain_http_to_the_tls_port_gets_no_metrics(pki: Issued) -> None:
    with _served(pki) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            conn.getresponse().read()
        conn.close()


def test_tls_1_2_is_refused(pki: Issued) -> None:
    old = _client(pki)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with _served(pki) as server, pytest.raises(ssl.SSLError):
        _get(server.port, old, TOKEN)


def test_mutual_tls_demands_a_client_certificate_from_the_ca(pki: Issued) -> None:
    with _served(pki, mutual=True) as server:
        # TLS 1.3 sends the refusal of a missing certificate after the handshake: it shows on the first read.
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            _get(server.port, _client(pki), TOKEN)
        status, _, _, _ = _get(server.port, _client(pki, client_cert=True), TOKEN)
    assert status == 200


def test_a_client_that_connects_and_says_nothing_holds_no_scrape_up(pki: Issued) -> None:
    with _served(pki) as server, socket.create_connection(("127.0.0.1", server.port), timeout=10):
        status, _, _, _ = _get(server.port, _client(pki), TOKEN)
    assert status == 200


def test_prometheus_scrapes_over_https_with_a_credentials_file_and_a_ca(pki: Issued, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    with _served(pki, host="0.0.0.0") as server:
        jobs = f"""
          - job_name: gpuscope
            scheme: https
            authorization: {{credentials_file: {token_file}}}
            tls_config: {{ca_file: {pki.ca}}}
            static_configs: [{{targets: ["127.0.0.1:{server.port}"]}}]
          - job_name: no-token
            scheme: https
            tls_config: {{ca_file: {pki.ca}}}
            static_configs: [{{targets: ["127.0.0.1:{server.port}"]}}]
        """
        with prometheus_server(tmp_path, textwrap.dedent(jobs).strip("\n")) as url:
            deadline = time.monotonic() + 60
            while True:  # until both jobs were scraped once
                try:
                    up = {str(s["metric"]["job"]): s["value"][1] for s in query(url, "up")}
                except OSError:
                    up = {}
                if len(up) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            calls = query(url, 'gpuscope_calls_total{job="gpuscope"}')
    assert up == {"gpuscope": "1", "no-token": "0"}
    assert [(s["metric"]["op"], s["value"][1]) for s in calls] == [("cudaMalloc", "6")]


def _plain_get(port: int, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers=headers)
        res = conn.getresponse()
        return res.status, res.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:9464"},
        {"Host": "127.0.0.1:1@evil.example"},
        {"Host": "127.0.0.1", "Origin": "http://evil.example"},
        {"Host": "127.0.0.1", "Origin": "http://127.0.0.1:1.evil.example"},
    ],
)
def test_without_a_token_a_request_under_another_name_gets_no_metrics(headers: dict[str, str]) -> None:
    """DNS rebinding: a page elsewhere pointed at the loopback port arrives under a name of its own."""
    server = serve_metrics(_collector(), "127.0.0.1", 0)
    try:
        status, body = _plain_get(server.port, headers)
    finally:
        server.close()
    assert status == 403 and json.loads(body)["error"]["code"] == "bad_host"
    assert b"gpuscope_calls" not in body


def test_without_a_token_loopback_names_and_addresses_are_served() -> None:
    server = serve_metrics(_collector(), "127.0.0.1", 0)
    try:
        for host in ("localhost:9464", f"127.0.0.1:{server.port}", "[::1]:9464", "10.1.2.3:9464"):
            status, body = _plain_get(server.port, {"Host": host})
            assert status == 200 and b"gpuscope_calls_total" in body, host
    finally:
        server.close()
