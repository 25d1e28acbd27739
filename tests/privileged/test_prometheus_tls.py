"""`gpuscope trace --prometheus` on an address beyond loopback serves HTTPS with a token, and the recording's counts."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscope.fleet.certs import init_fleet
from tests.conftest import StandinLibs, TraceRun
from tests.privileged.support import cudart_script

CALLS = 300
TOKEN = "scrape-token-of-some-length-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int, ctx: ssl.SSLContext, token: str | None) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        res = conn.getresponse()
        return res.status, res.read().decode()
    finally:
        conn.close()


def _calls(text: str) -> dict[str, int]:
    """op -> gpuscope_calls_total in a scrape."""
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuscope_calls_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('op="', 1)[1].split('"', 1)[0]] = int(float(value))
    return out


def test_metrics_beyond_loopback_are_https_with_a_token(tmp_path: Path, standin: StandinLibs) -> None:
    # given: a server certificate for 127.0.0.1, a private token file, a workload that waits for its stdin
    pki = init_fleet(tmp_path / "pki", ["localhost"], ["127.0.0.1"])
    cert, key = pki.servers["localhost"]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    # held until the test has scraped
    script = cudart_script(tmp_path / "work.py", standin.cudart, CALLS, sync=False, then="sys.stdin.readline()")
    port = _free_port()
    tracer = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(tmp_path / "t.db"),
         "--lib", str(standin.cudart), "--prometheus", f"0.0.0.0:{port}", "--prometheus-tls-cert", str(cert),
         "--prometheus-tls-key", str(key), "--prometheus-token-file", str(token_file),
         "--", sys.executable, str(script)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    try:
        assert tracer.stdout is not None
        assert tracer.stdout.readline().strip() == "calls done"
        # when: scraped with the token (until the last call is counted), without it, and in plain HTTP
        deadline = time.monotonic() + 20
        while True:
            status, text = _scrape(port, ctx, TOKEN)
            if _calls(text).get("cudaMalloc") == CALLS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        refused, _ = _scrape(port, ctx, None)
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            plain.getresponse().read()
        plain.close()
        _, stderr = tracer.communicate(input="\n", timeout=60)  # the workload's line: it ends
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()
    # then: the token's scrape saw the recording's exact count; the others got nothing
    assert tracer.returncode == 0, stderr
    assert status == 200 and refused == 401
    recorded = TraceRun(tmp_path / "t.db", 0, "", "").op_counts()
    assert recorded["cudaMalloc"] == CALLS
    assert _calls(text) == {"cudaMalloc": CALLS}
