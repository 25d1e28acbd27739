"""The fleet set-up `certs init` prints works as printed: the fleet CA's client certificate is the credential."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from http.client import HTTPSConnection
from pathlib import Path

import pytest

from gpuscope.fleet.certs import init_fleet
from tests.serve.support import Server, contention_recording, dashboard


def _gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("GPUSCOPE_TOKEN", None)  # as printed: no token anywhere
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _get(server: Server, pki: Path, *, token: str | None) -> int:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(pki / "client.pem", pki / "client.key")
    conn = HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=30)
    conn.request("GET", "/api/v1/time", headers={"Authorization": f"Bearer {token}"} if token else {})
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return contention_recording(tmp_path_factory.mktemp("certs") / "run.db")


def test_the_printed_fleet_commands_work_without_a_token(tmp_path: Path, recording: Path) -> None:
    # given the PKI `certs init` writes, and what it prints
    pki = tmp_path / "pki"
    init = _gpuscope("certs", "init", str(pki), "--nodes", "localhost", "--also-name", "127.0.0.1")
    assert init.returncode == 0, init.stderr
    node_line = next(line for line in init.stdout.splitlines() if "gpuscope dashboard" in line)
    assert "--ca-cert" in node_line and "TOKEN" not in node_line
    # when a node serves as printed (its own random token: nobody set one) and the client asks as printed
    cert, key = pki / "localhost" / "server.pem", pki / "localhost" / "server.key"
    with dashboard(recording, tmp_path / "home", "--tls-cert", str(cert), "--tls-key", str(key),
                   "--ca-cert", str(pki / "ca.pem")) as server:  # fmt: skip
        p = _gpuscope("nodes", "--nodes", f"127.0.0.1:{server.port}", "--ca-cert", str(pki / "ca.pem"),
                      "--client-cert", str(pki / "client.pem"), "--client-key", str(pki / "client.key"), "--json")  # fmt: skip
        # then the node answers: the client certificate from the fleet's CA is the credential
        assert p.returncode == 0, p.stderr
        (row,) = json.loads(p.stdout)
        assert row["ok"], row
        # and a token that is sent must still be the right one
        assert _get(server, pki, token=None) == 200
        assert _get(server, pki, token="not-the-token-0123456789") == 401
        assert _get(server, pki, token=server.token) == 200


def test_without_mutual_tls_the_token_is_still_required(tmp_path: Path, recording: Path) -> None:
    with dashboard(recording, tmp_path / "home") as server:
        assert server.get_json("/api/v1/time", token=None)[0] == 401


def test_a_certificate_that_does_not_name_the_address_says_how_to_make_one_that_does(
    tmp_path: Path, recording: Path
) -> None:
    # given a node whose certificate names only its host name, reached by its address
    issued = init_fleet(tmp_path / "pki", ["gpu-1"], [])
    cert, key = issued.servers["gpu-1"]
    with dashboard(recording, tmp_path / "home", "--tls-cert", str(cert), "--tls-key", str(key),
                   "--ca-cert", str(issued.ca)) as server:  # fmt: skip
        p = _gpuscope("nodes", "--nodes", f"127.0.0.1:{server.port}", "--ca-cert", str(issued.ca),
                      "--client-cert", str(issued.client[0]), "--client-key", str(issued.client[1]), "--json")  # fmt: skip
    # then the failure names the address and the flag that fixes it
    assert p.returncode != 0 or not json.loads(p.stdout)[0]["ok"]
    text = p.stdout + p.stderr
    assert "does not name 127.0.0.1" in text and "--also-name 127.0.0.1" in text, text
