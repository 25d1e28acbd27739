"""The dashboard server's defences, against a real server process with real TLS clients."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import stat
import subprocess
import sys
from collections.abc import Iterator
from http.client import HTTPSConnection
from pathlib import Path

import pytest

from gpuscope.fleet.certs import init_fleet
from tests.serve.support import Server, contention_recording, dashboard


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("served")
    with dashboard(contention_recording(root / "run.db"), root / "home") as server:
        yield server


def _handshake(server: Server, ctx: ssl.SSLContext) -> str:
    conn = HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
    try:
        conn.connect()
        return str(conn.sock.version())
    finally:
        conn.close()


def test_tls_1_3_is_spoken_and_1_2_refused(served: Server) -> None:
    assert _handshake(served, served.context()) == "TLSv1.3"
    old = served.context()
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        _handshake(served, old)


def test_the_self_signed_certificate_is_kept_private_and_its_fingerprint_printed(served: Server) -> None:
    tls = served.home / ".gpuscope" / "tls"
    assert stat.S_IMODE((tls / "dashboard-key.pem").stat().st_mode) == 0o600
    der = ssl.PEM_cert_to_DER_cert((tls / "dashboard-cert.pem").read_text())
    expected = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    assert served.info["fingerprint_sha256"] == expected


@pytest.mark.parametrize("token", [None, "wrong-token-of-some-length", ""])
def test_every_route_needs_the_token(served: Server, token: str | None) -> None:
    for path in ("/", "/static/dashboard.js", "/api/v1/ops", "/api/v1/time", "/api/v1/openapi.json", "/nope"):
        res, body = served.request("GET", path, token=token)
        assert res.status == 401, path
        assert json.loads(body)["error"]["code"] == "unauthorized"
        assert res.getheader("www-authenticate", "").startswith("Bearer")


def test_a_bearer_token_opens_the_api(served: Server) -> None:
    status, body = served.get_json("/api/v1/time")
    assert status == 200 and isinstance(body["timestamp_ns"], int)


def test_the_token_url_sets_a_strict_cookie_and_leaves_the_address_bar(served: Server) -> None:
    res, _ = served.request("GET", f"/?token={served.token}&x=1", token=None)
    assert res.status == 303
    assert res.getheader("location") == "/?x=1"  # the token is gone from the URL
    cookie = res.getheader("set-cookie", "")
    assert {"HttpOnly", "Secure", "SameSite=Strict", "Path=/"} <= {p.strip() for p in cookie.split(";")[1:]}
    assert served.token not in cookie  # an HMAC of it, not the token
    page, html = served.request("GET", "/", token=None, headers={"Cookie": cookie.split(";")[0]})
    assert page.status == 200 and b"<title>gpuscope</title>" in html
    wrong, _ = served.request("GET", "/?token=not-it", token=None)
    assert wrong.status == 401


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8080",
        "127.0.0.1.evil.example",
        "localhost.evil",
        "127.0.0.1:1@evil.example",  # user info: a URL parser takes evil.example as the host
        "127.0.0.1:1.evil.example",
        "localhost:99999",
        "localhost:80/evil",
        "[::1].evil.example",
    ],
)
def test_a_foreign_host_header_is_refused_even_with_the_token(served: Server, host: str) -> None:
    res, body = served.request("GET", "/api/v1/time", headers={"Host": host})
    assert res.status == 403 and json.loads(body)["error"]["code"] == "bad_host"


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "https://127.0.0.1:1.evil.example", "https://127.0.0.1:1@evil.example", "null"]
)
def test_a_foreign_origin_is_refused_even_with_the_token(served: Server, origin: str) -> None:
    res, body = served.request("GET", "/api/v1/time", headers={"Origin": origin})
    assert res.status == 403 and json.loads(body)["error"]["code"] == "bad_origin"


def test_the_pages_own_origin_is_served(served: Server) -> None:
    res, _ = served.request("GET", "/api/v1/time", headers={"Origin": f"https://127.0.0.1:{served.port}"})
    assert res.status == 200


def test_loopback_host_names_are_served(served: Server) -> None:
    for host in ("localhost", f"127.0.0.1:{served.port}", f"localhost:{served.port}", "[::1]:8080"):
        res, _ = served.request("GET", "/api/v1/time", headers={"Host": host})
        assert res.status == 200, host


def test_every_response_carries_a_strict_content_security_policy(served: Server) -> None:
    for path in ("/", "/api/v1/ops", "/static/dashboard.js"):
        res, _ = served.request("GET", path)
        csp = res.getheader("content-security-policy", "")
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert res.getheader("x-content-type-options") == "nosniff"


def test_the_page_loads_nothing_from_outside(served: Server) -> None:
    for path in ("/", "/static/dashboard.js", "/static/dashboard.css"):
        _, body = served.request("GET", path)
        text = body.decode()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "eval(" not in text


WRITES = [
    "INSERT INTO comms(id, comm) VALUES (99, 'x')",
    "DELETE FROM event_log",
    "UPDATE sessions SET node = 'x'",
    "DROP TABLE sessions",
    "ATTACH DATABASE '{tmp}/other.db' AS other",
    "PRAGMA writable_schema = 1",
    "VACUUM INTO '{tmp}/copy.db'",
    "SELECT 1; DELETE FROM event_log",
    "CREATE TABLE t(x)",
    "REINDEX",
]


@pytest.mark.parametrize("sql", WRITES)
def test_query_refuses_every_write_and_leaves_the_recording_as_it_was(
    tmp_path: Path, sql: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path / "rec"
    folder.mkdir()
    db = contention_recording(folder / "run.db")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    files = sorted(os.listdir(folder))
    with dashboard(db, tmp_path / "home") as server:
        res, body = server.request(
            "POST", "/api/v1/query", body=json.dumps({"sql": sql.format(tmp=folder)}).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        assert res.status == 400, body
        assert json.loads(body)["error"]["code"] == "refused"
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(os.listdir(folder)) == files


def test_query_reads_with_a_row_limit(served: Server) -> None:
    body = json.dumps({"sql": "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY op", "limit": 2}).encode()
    res, data = served.request("POST", "/api/v1/query", body=body)
    doc = json.loads(data)
    assert res.status == 200 and doc["columns"] == ["op", "n"] and len(doc["rows"]) == 2 and doc["truncated"]


def test_query_refuses_a_function_that_reveals_the_servers_memory(served: Server) -> None:
    # fts3_tokenizer returns an address in the server's process: an address-layout leak to a token holder
    body = json.dumps({"sql": "SELECT hex(fts3_tokenizer('simple')) AS a"}).encode()
    res, data = served.request("POST", "/api/v1/query", body=body)
    error = json.loads(data)["error"]
    assert res.status == 400 and error["code"] == "refused" and "fts3_tokenizer()" in error["message"], error


def test_a_request_body_over_the_limit_is_refused(served: Server) -> None:
    res, data = served.request("POST", "/api/v1/query", body=b"{" + b" " * 70_000 + b"}")
    assert res.status == 413 and json.loads(data)["error"]["code"] == "too_large"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # the fleet's CA and client certificate, and another CA's client certificate (`gpuscope certs init` twice)
    folder = tmp_path_factory.mktemp("pki")
    ours = init_fleet(folder / "fleet", ["node-1"])
    theirs = init_fleet(folder / "other", ["intruder"])
    return {
        "ca": ours.ca,
        "good_cert": ours.client[0],
        "good_key": ours.client[1],
        "bad_cert": theirs.client[0],
        "bad_key": theirs.client[1],
    }


def test_mutual_tls_demands_a_client_certificate_from_the_ca(tmp_path: Path, pki: dict[str, Path]) -> None:
    db = contention_recording(tmp_path / "run.db")
    with dashboard(db, tmp_path / "home", "--ca-cert", str(pki["ca"])) as server:
        # no certificate: the handshake (or the first read after it, in TLS 1.3) fails
        with pytest.raises((ssl.SSLError, ConnectionError)):
            server.request("GET", "/api/v1/time")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            server.request("GET", "/api/v1/time", ctx=server.context(cert=(pki["bad_cert"], pki["bad_key"])))
        res, _ = server.request("GET", "/api/v1/time", ctx=server.context(cert=(pki["good_cert"], pki["good_key"])))
        assert res.status == 200
        # the certificate from the CA authenticates the client: no token is needed, but a wrong one is refused
        good = server.context(cert=(pki["good_cert"], pki["good_key"]))
        assert server.request("GET", "/api/v1/time", token=None, ctx=good)[0].status == 200
        assert server.request("GET", "/api/v1/time", token="wrong-token-0123456789", ctx=good)[0].status == 401


def _start_error(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    db = contention_recording(tmp_path / "run.db")
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", "dashboard", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or dict(os.environ, HOME=str(tmp_path)),
        check=False,
    )


def test_plain_http_is_refused_beyond_loopback(tmp_path: Path) -> None:
    p = _start_error(tmp_path, "--no-tls", "--addr", "0.0.0.0:0")
    assert p.returncode == 2 and "plain HTTP" in p.stderr and "Traceback" not in p.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-length\n")
    token.chmod(0o644)
    p = _start_error(tmp_path, "--token-file", str(token))
    assert p.returncode == 2 and "chmod 600" in p.stderr


def test_a_missing_recording_is_one_line_before_listening(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "dashboard", "--db", str(tmp_path / "none.db")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert p.returncode != 0 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
