"""The dashboard's HTTP surface against a corpus of hostile requests, sent raw over real TLS to a real server.

Every answer is the API's one error shape with its documented status, never a
500 for bad input; slow clients are dropped within a bound while others are
served; the server logs no traceback and still answers ``/api/v1/time`` after
each case.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gpuscope.serve.endpoints import ENDPOINTS
from gpuscope.serve.protocol import MAX_CONNECTIONS, MAX_HANDSHAKES, REQUEST_TIMEOUT_S, TLS_HANDSHAKE_TIMEOUT_S
from gpuscope.serve.security import MAX_BODY_BYTES, MAX_HEADER_BYTES, MAX_HEADERS
from tests.serve.hostile import (
    Answer,
    ServerLog,
    assert_error,
    exchange,
    logged_dashboard,
    parse,
    request,
    tls_socket,
)
from tests.serve.support import Server, contention_recording

SHAPE = 'body: a JSON object {"sql": "<one read-only statement>", "limit": N}'
# Generous: a dropped client is dropped after REQUEST_TIMEOUT_S; the bound only catches "never".
DROP_BOUND_S = REQUEST_TIMEOUT_S * 6


@pytest.fixture(scope="module")
def served_and_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, ServerLog]]:
    root = tmp_path_factory.mktemp("hostile-http")
    with logged_dashboard(contention_recording(root / "run.db"), root / "home", "--mcp") as pair:
        yield pair


@pytest.fixture(scope="module")
def served(served_and_log: tuple[Server, ServerLog]) -> Server:
    return served_and_log[0]


@pytest.fixture(autouse=True)
def still_serving(served: Server) -> Iterator[None]:
    yield
    status, doc = served.get_json("/api/v1/time")
    assert status == 200 and doc["timestamp_ns"] > 0, "the server stopped answering after this case"


def post_query(server: Server, body: bytes, **kw: Any) -> Answer | None:
    return exchange(server, request(server, "POST", "/api/v1/query", body=body, **kw))


# -- request bodies --------------------------------------------------------------------------------------------------

MALFORMED_JSON = [
    b"",
    b"not json",
    b"{",
    b"}",
    b"{'sql': 'SELECT 1'}",
    b'{"sql": "SELECT 1",}',
    b'{"sql": "SELECT 1"} trailing',
    b'{"sql": "SELECT 1"}{"sql": "SELECT 2"}',
    b'{"sql": NaN}',
    b'{"sql": "SELECT 1", "limit": Infinity}',
    b'{"sql": "SELECT 1", "timeout_s": -Infinity}',
    b"NaN",
    b"[" * 30_000 + b"]" * 30_000,  # deeper than the parser's recursion
    b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b"1" * 5000,  # more digits than Python converts
    b'{"sql": "SELECT 1", "limit": ' + b"9" * 5000 + b"}",
    b"\xff\xfe{\x00}\x00",  # UTF-16
    b'{"sql": "\xc3\x28"}',  # invalid UTF-8
    b'{"sql": "\xed\xa0\x80"}',  # an encoded surrogate: invalid UTF-8
    b"\xef\xbb\xbf" + b'{"sql": "SELECT 1"}',  # a byte-order mark
    b"\x00",
    b'{"sql": "SELECT 1"\x00}',
    b'{"sql": "SELECT \x01"}',  # a raw control character inside a string
]


@pytest.mark.parametrize("body", MALFORMED_JSON, ids=lambda b: repr(b[:24]))
def test_malformed_json_is_400_bad_json(served: Server, body: bytes) -> None:
    error = assert_error(post_query(served, body), 400, "bad_json")
    assert SHAPE in error["message"]


WRONG_TYPES: list[tuple[Any, str]] = [
    ([], "bad_json"),
    ([1, 2], "bad_json"),
    (5, "bad_json"),
    ("SELECT 1", "bad_json"),
    (None, "bad_json"),
    (True, "bad_json"),
    ({}, "bad_request"),
    ({"sql": 5}, "bad_request"),
    ({"sql": None}, "bad_request"),
    ({"sql": ["SELECT 1"]}, "bad_request"),
    ({"sql": {"sql": "SELECT 1"}}, "bad_request"),
    ({"sql": ""}, "bad_request"),
    ({"sql": " \t\n"}, "bad_request"),
    ({"SQL": "SELECT 1"}, "bad_request"),
    ({"sql": "SELECT 1", "limit": "10"}, "bad_request"),
    ({"sql": "SELECT 1", "limit": 1.5}, "bad_request"),
    ({"sql": "SELECT 1", "limit": -1}, "bad_request"),
    ({"sql": "SELECT 1", "limit": 0}, "bad_request"),
    ({"sql": "SELECT 1", "limit": 10**30}, "bad_request"),
    ({"sql": "SELECT 1", "limit": -(10**30)}, "bad_request"),
    ({"sql": "SELECT 1", "limit": True}, "bad_request"),
    ({"sql": "SELECT 1", "limit": [10]}, "bad_request"),
    ({"sql": "SELECT 1", "limit": None}, "bad_request"),
    ({"sql": "SELECT 1", "pids": "100"}, "bad_request"),
    ({"sql": "SELECT 1", "pids": 100}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [1.5]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [-1]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [10**30]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [2**63]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [[100]]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": [True]}, "bad_request"),
    ({"sql": "SELECT 1", "pids": {"a": 1}}, "bad_request"),
    ({"sql": "SELECT 1", "since": 5}, "bad_request"),
    ({"sql": "SELECT 1", "since": ["5m"]}, "bad_request"),
    ({"sql": "SELECT 1", "since": "5 parsecs"}, "bad_request"),
    ({"sql": "SELECT 1", "since": "1e999s"}, "bad_request"),
    ({"sql": "SELECT 1", "since": "nan"}, "bad_request"),
    ({"sql": "SELECT 1", "since": "-5m"}, "bad_request"),
    ({"sql": "SELECT 1", "since": "\x00"}, "bad_request"),
    ({"sql": "SELECT 1", "since": "\ud800"}, "bad_request"),
    ({"sql": "SELECT 1", "from": "2026-13-45T99:99:99Z"}, "bad_request"),
    ({"sql": "SELECT 1", "to": {}}, "bad_request"),
    ({"sql": "SELECT 1", "from": "@" + "9" * 400}, "bad_request"),
    ({"sql": "SELECT 1", "timeout_s": "5"}, "bad_request"),
    ({"sql": "SELECT 1", "timeout_s": 0}, "bad_request"),
    ({"sql": "SELECT 1", "timeout_s": -1}, "bad_request"),
    ({"sql": "SELECT 1", "timeout_s": True}, "bad_request"),
    ({"sql": "SELECT '\ud800'"}, "bad_sql"),  # a lone surrogate, as JSON may escape it
    (b'{"sql": "SELECT 1", "timeout_s": 1e400}', "bad_request"),  # JSON reads 1e400 as infinity
    (b'{"sql": "SELECT 1", "limit": 1e400}', "bad_request"),
    ({"sql": "\ud800; SELECT 1"}, "bad_sql"),
    ({"sql": "SELEC 1"}, "bad_sql"),
    ({"sql": "SELECT * FROM events WHERE pid = '1' OR '1'='1'; DROP TABLE events"}, "refused"),
    ({"sql": "SELECT 1; DELETE FROM event_log"}, "refused"),
    ({"sql": "ATTACH DATABASE '/etc/passwd' AS p"}, "refused"),
    ({"sql": "SELECT load_extension('/tmp/x.so')"}, "refused"),
    ({"sql": "SELECT readfile('/etc/passwd')"}, "bad_sql"),
    ({"sql": "PRAGMA writable_schema = 1"}, "refused"),
]


@pytest.mark.parametrize(("doc", "code"), WRONG_TYPES, ids=lambda v: repr(v)[:40])
def test_json_of_the_wrong_shape_or_type_is_a_400_naming_what_is_wrong(served: Server, doc: Any, code: str) -> None:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    assert_error(post_query(served, body), 400, code)


RESULTS_TOO_LARGE = [
    "SELECT randomblob(1000000000)",
    "SELECT zeroblob(1000000000)",
    "SELECT length(randomblob(5000000))",  # a value SQLite makes is bounded even when it is not returned
    "SELECT replace(hex(zeroblob(3000000)), '0', 'xyz')",
    # many rows of long text: past the answer's 16 MiB
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000) SELECT printf('%.4000c', 'y') FROM c",
    # one row of many long values: past SQLite's memory cap before any row reaches Python
    "SELECT " + ", ".join(["zeroblob(4000000)"] * 80),
]


@pytest.mark.parametrize("sql", RESULTS_TOO_LARGE, ids=lambda s: s[:40])
def test_a_result_over_the_size_limits_is_400_result_too_large_with_a_fix(served: Server, sql: str) -> None:
    body = json.dumps({"sql": sql, "limit": 10_000}).encode()
    error = assert_error(post_query(served, body), 400, "result_too_large")
    assert "result too large" in error["message"] and "LIMIT" in error["message"]


# (name, request, status, code): bodies past the 64 KiB limit, however they are framed.
def _too_large_cases(server: Server) -> list[tuple[str, bytes]]:
    over = b"{" + b" " * MAX_BODY_BYTES + b"}"
    chunked = [("Transfer-Encoding", "chunked")]
    chunks = b"".join(b"%x\r\n" % 0x4000 + b" " * 0x4000 + b"\r\n" for _ in range(6)) + b"0\r\n\r\n"
    return [
        ("over by content-length", request(server, "POST", "/api/v1/query", body=over)),
        (
            "a lying, huge content-length",
            request(server, "POST", "/api/v1/query", headers=[("Content-Length", str(10**12))], length=False),
        ),
        ("chunked", request(server, "POST", "/api/v1/query", headers=chunked, body=chunks, length=False)),
        ("chunked to mcp", request(server, "POST", "/mcp", headers=chunked, body=chunks, length=False)),
        ("over to mcp", request(server, "POST", "/mcp", body=over)),
        ("a body on a GET", request(server, "GET", "/api/v1/ops", body=over)),
    ]


@pytest.mark.parametrize("case", range(6))
def test_bodies_over_the_limit_are_413_however_they_are_framed(served: Server, case: int) -> None:
    name, data = _too_large_cases(served)[case]
    error = assert_error(exchange(served, data), 413, "too_large")
    assert str(MAX_BODY_BYTES) in error["message"], name


def test_a_promised_body_that_never_comes_is_cut_off_with_408(served: Server) -> None:
    # given a request that promises 100 bytes and sends 10
    data = request(served, "POST", "/api/v1/query", headers=[("Content-Length", "100")], length=False)
    conn = tls_socket(served, timeout_s=DROP_BOUND_S)
    started = time.monotonic()
    conn.sendall(data + b'{"sql": "S')
    # when the server has waited its time (the socket's own timeout bounds "never")
    raw = b""
    while chunk := conn.recv(65536):
        raw += chunk
    conn.close()
    # then it answered 408 and closed, within the bound
    assert_error(parse(raw), 408, "request_timeout")
    assert time.monotonic() - started < DROP_BOUND_S


# -- HTTP framing and headers ----------------------------------------------------------------------------------------

BAD_HTTP: list[tuple[str, bytes]] = [
    ("garbage", b"GARBAGE\r\n\r\n"),
    ("no method", b" /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    ("bad version", b"GET /api/v1/time HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n"),
    ("space in the target", b"GET /api/v1/ time HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    ("NUL in the target", b"GET /api/v1/time\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    ("non-ASCII in the target", b"GET /api/v1/t\xc3\xa9 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    ("NUL in a header", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\x00b\r\n\r\n"),
    ("CR in a header value", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rSet-Cookie: x=1\r\n\r\n"),
    ("LF inside a header", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\nno-colon-here\r\n\r\n"),
    ("a space in a header name", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nX A: b\r\n\r\n"),
    ("space before the colon", b"GET /api/v1/time HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n"),
    ("a header without a name", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\n: b\r\n\r\n"),
    ("no Host in HTTP/1.1", b"GET /api/v1/time HTTP/1.1\r\n\r\n"),
    ("two Hosts", b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n"),
    ("a negative content-length", b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n"),
    ("a word for a content-length", b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ten\r\n\r\n"),
    ("a hex content-length", b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0x10\r\n\r\n"),
    (
        "a content-length past 64 bits",
        b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + b"9" * 40 + b"\r\n\r\n",
    ),
    (
        "two content-lengths",
        b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    ),
    (
        "a bad chunk size",
        b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    ),
    (
        "an unknown transfer-encoding",
        b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n{}",
    ),
    ("an HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
]


@pytest.mark.parametrize(("name", "data"), BAD_HTTP, ids=[c[0] for c in BAD_HTTP])
def test_malformed_http_is_400_bad_http_without_echoing_the_request(served: Server, name: str, data: bytes) -> None:
    answer = exchange(served, data)
    assert answer is not None
    if answer.status in (401, 403):  # h11 read it as a request after all: the guard refuses it (no token, no Host)
        assert_error(answer, answer.status, "bad_host" if answer.status == 403 else "unauthorized")
        return
    error = assert_error(answer, 400, "bad_http")
    assert "Set-Cookie" not in error["message"] and "set-cookie" not in answer.headers


# (name, extra headers, Host, status, code): each is otherwise a valid, authorised GET /api/v1/time.
HEADERS: list[tuple[str, list[tuple[str, str]], str, int, str | None]] = [
    ("a foreign Host", [], "evil.example", 403, "bad_host"),
    ("a foreign Host with a loopback port", [], "evil.example:8080", 403, "bad_host"),
    ("loopback as a subdomain", [], "127.0.0.1.evil.example", 403, "bad_host"),
    ("credentials in the Host", [], "localhost@evil.example", 403, "bad_host"),
    ("an empty Host", [], "", 403, "bad_host"),
    ("a Host with a space", [], "local host", 403, "bad_host"),
    ("a huge Host", [], "a" * 8000, 403, "bad_host"),
    ("a foreign Origin", [("Origin", "https://evil.example")], "127.0.0.1", 403, "bad_origin"),
    ("a null Origin", [("Origin", "null")], "127.0.0.1", 403, "bad_origin"),
    ("a huge header", [("X-Big", "a" * (MAX_HEADER_BYTES + 1))], "127.0.0.1", 431, "headers_too_large"),
    ("many headers", [(f"X-H{i}", "v") for i in range(MAX_HEADERS + 1)], "127.0.0.1", 431, "headers_too_large"),
    ("thousands of headers", [("X-Same", "v")] * 3000, "127.0.0.1", 431, "headers_too_large"),
    ("a high-bit header value", [("X-A", "\xff\xfe")], "127.0.0.1", 200, None),
    ("an unknown Expect", [("Expect", "200-ok")], "127.0.0.1", 200, None),
    ("a second Authorization", [("Authorization", "Bearer wrong-token-of-some-length")], "127.0.0.1", 401, None),
    ("a WebSocket upgrade", [("Connection", "Upgrade"), ("Upgrade", "websocket")], "127.0.0.1", 200, None),
    ("an h2c upgrade", [("Upgrade", "h2c"), ("HTTP2-Settings", "AAMAAABkAAQAAP__")], "127.0.0.1", 200, None),
]


@pytest.mark.parametrize(("name", "headers", "host", "status", "code"), HEADERS, ids=[c[0] for c in HEADERS])
def test_hostile_headers_are_refused_in_the_error_shape(
    served: Server, name: str, headers: list[tuple[str, str]], host: str, status: int, code: str | None
) -> None:
    answer = exchange(served, request(served, "GET", "/api/v1/time", headers=headers, host=host))
    if status == 200:
        assert answer is not None and answer.status == 200 and "timestamp_ns" in answer.json(), answer
    else:
        assert_error(answer, status, code)


@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("/%0d%0aSet-Cookie:%20evil=1", "/%0D%0ASet-Cookie:%20evil=1"),
        ("//evil.example/x", "/evil.example/x"),
        ("/%2f%2fevil.example", "/evil.example"),
        ("/%5cevil.example", "/%5Cevil.example"),
        ("/\\evil.example", "/%5Cevil.example"),
    ],
)
def test_the_login_redirect_stays_on_this_site_and_injects_no_header(
    served: Server, target: str, location: str
) -> None:
    answer = exchange(served, request(served, "GET", f"{target}?token={served.token}", token=False))
    assert answer is not None and answer.status == 303, answer
    assert answer.headers["location"] == location
    assert "evil" not in answer.headers.get("set-cookie", "")


# -- query strings on every endpoint ---------------------------------------------------------------------------------

# Raw (already percent-encoded) values: NUL, garbage escapes, invalid UTF-8, a surrogate, signs, huge numbers,
# SQL and markup, and a long value that still fits the header limit.
QUERY_VALUES = [
    "%00", "%zz", "%", "%%", "%ff%fe", "%ed%a0%80", "%c0%ae%c0%ae", "+", "-1", "1e309", "9" * 40, "nan",
    quote("'; DROP TABLE events; --"), quote("<svg onload=1>"), quote("\u202e"), quote("../../etc/passwd"),
    "x" * 8000,
]  # fmt: skip


def _get_targets() -> list[tuple[str, str]]:
    return [(f"/api/v1{ep.path}", p.name) for ep in ENDPOINTS for p in ep.params]


def test_every_endpoint_is_in_the_corpus(served: Server) -> None:
    status, spec = served.get_json("/api/v1/openapi.json")
    assert status == 200
    gets = {
        (path, p["name"]) for path, item in spec["paths"].items() for p in item.get("get", {}).get("parameters", [])
    }
    assert gets == set(_get_targets())


@pytest.mark.parametrize(("path", "param"), _get_targets(), ids=lambda v: v)
def test_hostile_query_strings_get_200_or_a_400_never_a_500(served: Server, path: str, param: str) -> None:
    targets = [f"{path}?{param}={value}" for value in QUERY_VALUES]
    targets += [
        f"{path}?{param}=1&{param}=abc&{param}=",  # repeated
        f"{path}?{param}",  # no value
        f"{path}?{param}=1&&&==&%3d=%3d",  # empty and odd pairs
        f"{path}?" + "&".join(f"x{i}=1" for i in range(500)),  # many unknown parameters
    ]
    for target in targets:
        answer = exchange(served, request(served, "GET", target))
        assert answer is not None, target
        if answer.status == 200:
            assert isinstance(answer.json(), dict), target
        else:
            assert_error(answer, 400, "bad_request")


@pytest.mark.parametrize("path", [f"/api/v1{ep.path}" for ep in ENDPOINTS])
def test_a_malformed_json_body_on_a_get_endpoint_is_ignored(served: Server, path: str) -> None:
    for body in (b"{not json", b"[" * 1000, b"\xff\xfe", b'{"sql": "DELETE FROM event_log"}'):
        data = request(served, "GET", path, body=body, headers=[("Content-Type", "application/json")])
        answer = exchange(served, data)
        assert answer is not None and answer.status == 200 and isinstance(answer.json(), dict), (path, body[:20])


def test_a_url_over_the_header_limit_is_431(served: Server) -> None:
    target = "/api/v1/events?op=" + "x" * MAX_HEADER_BYTES
    assert_error(exchange(served, request(served, "GET", target)), 431, "headers_too_large")


# -- paths -----------------------------------------------------------------------------------------------------------

TRAVERSALS = [
    "/static/../../etc/passwd",
    "/static/%2e%2e/%2e%2e/etc/passwd",
    "/static/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/static/..%2f..%2fetc%2fpasswd",
    "/static/%252e%252e%252fetc%252fpasswd",
    "/static/..\\..\\etc\\passwd",
    "/static/%2e%2e%5c%2e%2e%5cetc%5cpasswd",
    "/static/%c0%ae%c0%ae%c0%afetc%c0%afpasswd",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/C:%5cWindows%5cwin.ini",
    "/static/~root",
    "/static/dashboard.js%00.png",
    "/static/dashboard.js/..",
    "/static/./dashboard.js",
    "/static/.hidden",
    "/static/__init__.py",
    "/static/../app.py",
    "/static/..%2fapp.py",
    "/static/%2e%2e/security.py",
    "/static/",
    "/static",
    "/../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "//etc/passwd",
    "/api/v1/../../etc/passwd",
    "/api/v1/%2e%2e/openapi.json/../../../etc/passwd",
    "/favicon.ico/../../etc/passwd",
    "/mcp/../etc/passwd",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_path_traversal_never_leaves_the_packaged_static_files(served: Server, target: str) -> None:
    answer = exchange(served, request(served, "GET", target))
    assert answer is not None
    assert b"root:" not in answer.body and b"import " not in answer.body and b"[fonts]" not in answer.body
    if answer.status != 200:
        assert_error(answer, answer.status)
        assert answer.status in (400, 404, 405, 406), answer.status
    else:  # a name that normalises to a packaged file is that file
        assert answer.headers["content-type"].split(";")[0] in ("text/javascript", "text/html", "application/json")


def test_a_packaged_static_file_is_served(served: Server) -> None:
    answer = exchange(served, request(served, "GET", "/static/dashboard.js"))
    assert answer is not None and answer.status == 200 and answer.body


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "TRACE", "CONNECT", "OPTIONS", "FOO", "get"])
def test_methods_no_route_takes_are_405(served: Server, method: str) -> None:
    for target in ("/api/v1/ops", "/api/v1/query", "/static/dashboard.js", "/"):
        assert_error(exchange(served, request(served, method, target)), 405, "method_not_allowed")


# -- slow, many and vanishing clients --------------------------------------------------------------------------------


class SlowClient:
    """A connection that sends a byte at a time, keeping whatever the server answers."""

    def __init__(self, server: Server, first: bytes) -> None:
        self.conn = tls_socket(server)
        self.conn.sendall(first)
        self.received = b""
        self.closed = False

    def trickle(self) -> None:
        """Read what has come (without waiting), then send one more byte unless the server has closed."""
        self.conn.setblocking(False)
        try:
            while chunk := self.conn.recv(65536):
                self.received += chunk
            self.closed = True  # end of stream
        except ssl.SSLWantReadError:
            pass  # nothing yet (TLS 1.3 session tickets alone make the socket readable)
        except OSError:
            self.closed = True
        finally:
            self.conn.setblocking(True)
        if not self.closed:
            try:
                self.conn.sendall(b"a")
            except OSError:
                self.closed = True
        if self.closed:
            self.conn.close()


def test_slowloris_clients_are_dropped_while_others_are_served(served: Server) -> None:
    # given clients that send their headers one byte at a time, and one that sends its body so
    head = b"GET /api/v1/time HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body = request(served, "POST", "/api/v1/query", headers=[("Content-Length", "64")], length=False)
    slow = [SlowClient(served, head) for _ in range(19)] + [SlowClient(served, body)]
    # when they keep trickling, a byte each half second, while another client asks for the time
    started = time.monotonic()
    served_meanwhile = 0
    while not all(c.closed for c in slow) and time.monotonic() - started < DROP_BOUND_S:
        for c in slow:
            if not c.closed:
                c.trickle()
        status, _ = served.get_json("/api/v1/time")
        assert status == 200
        served_meanwhile += 1
        time.sleep(0.5)
    # then each was dropped with a 408, and the other client was served all along
    assert all(c.closed for c in slow), f"slow clients still connected after {DROP_BOUND_S} s"
    assert served_meanwhile >= 3
    for c in slow:
        assert_error(parse(c.received), 408, "request_timeout")


def test_an_idle_connection_is_closed(served: Server) -> None:
    conn = tls_socket(served, timeout_s=DROP_BOUND_S)
    started = time.monotonic()
    raw = b""
    while chunk := conn.recv(65536):  # the socket's timeout bounds "never"
        raw += chunk
    conn.close()
    assert time.monotonic() - started < DROP_BOUND_S
    assert_error(parse(raw), 408, "request_timeout")


def test_fifty_concurrent_clients_are_all_answered_or_cleanly_refused(served: Server) -> None:
    bodies = [
        request(served, "GET", "/api/v1/time"),
        request(served, "GET", "/api/v1/ops?since=1s"),
        request(served, "GET", "/api/v1/findings"),
        request(served, "POST", "/api/v1/query", body=b'{"sql": "SELECT op, count(*) FROM events GROUP BY op"}'),
        request(served, "POST", "/api/v1/query", body=b"not json"),
        request(served, "GET", "/static/dashboard.css"),
        b"GARBAGE\r\n\r\n",
    ]
    answers: list[tuple[bytes, Answer | None]] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for j in range(6):
            data = bodies[(k + j) % len(bodies)]
            got = exchange(served, data)
            with lock:
                answers.append((data, got))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert len(answers) == 50 * 6
    for data, got in answers:
        assert got is not None, data[:40]
        if got.status == 503:
            assert_error(got, 503, "busy")
        elif data.startswith(b"GARBAGE") or b"not json" in data:
            assert_error(got, 400)
        else:
            assert got.status == 200, (data[:40], got.status, got.body[:200])


def test_clients_that_vanish_mid_request_or_mid_response_leave_the_server_serving(served: Server) -> None:
    big = json.dumps(
        {
            "sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 10000) "
            "SELECT x, printf('%.300c', 'y') FROM c",
            "limit": 10_000,
        }
    ).encode()
    slow_sql = json.dumps(
        {"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"}
    ).encode()
    for i in range(12):
        conn = tls_socket(served)
        if i % 3 == 0:  # gone after the first bytes of a 3 MB answer, with a reset
            conn.sendall(request(served, "POST", "/api/v1/query", body=big))
            conn.recv(100)
        elif i % 3 == 1:  # gone halfway through its headers
            conn.sendall(request(served, "POST", "/api/v1/query", body=big)[:40])
        else:  # gone while its query runs
            conn.sendall(request(served, "POST", "/api/v1/query", body=slow_sql))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    answer = exchange(served, request(served, "POST", "/api/v1/query", body=big))
    assert answer is not None and answer.status == 200 and len(answer.json()["rows"]) == 10_000


def test_the_server_logged_no_traceback(served_and_log: tuple[Server, ServerLog]) -> None:
    # Last in this module: everything above has been sent by now.
    server, log = served_and_log
    status, _ = server.get_json("/api/v1/time")
    assert status == 200 and server.proc.poll() is None
    assert log.failures() == [], "".join(log.lines[-40:])


def test_a_client_that_never_starts_its_tls_handshake_is_dropped(served: Server) -> None:
    # given a client that connects over TCP and never says hello
    raw = socket.create_connection(("127.0.0.1", served.port), timeout=DROP_BOUND_S)
    started = time.monotonic()
    # when it waits
    try:
        got = raw.recv(1)  # the socket's timeout bounds "never"
    except ConnectionResetError:
        got = b""
    finally:
        raw.close()
    # then the server closed the connection after its handshake deadline, not asyncio's minute
    assert got == b""
    assert time.monotonic() - started < TLS_HANDSHAKE_TIMEOUT_S + 5


def _server_sockets(server: Server) -> int:
    """The sockets the server's process holds: listening, self-pipe, connections, handshakes in progress."""
    count = 0
    for fd in Path(f"/proc/{server.proc.pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass  # closed while we looked
    return count


def _let_go(conn: ssl.SSLSocket) -> tuple[bool, bytes]:
    """Without waiting: whether the server has closed this connection, and what it sent before."""
    conn.setblocking(False)
    got = b""
    try:
        while chunk := conn.recv(65536):
            got += chunk
        return True, got  # end of stream
    except ssl.SSLWantReadError:
        return bool(got), got  # still open (session tickets alone make the socket readable)
    except OSError:
        return True, got  # reset


# Beside the connections the server holds a few sockets of its own (listening, asyncio's self-pipe).
OWN_SOCKETS = 16


def test_idle_connections_past_the_cap_make_room_for_a_client_with_the_token(served: Server) -> None:
    # given a client without the token holding more idle TLS connections than the server keeps open at once
    held = [tls_socket(served, timeout_s=DROP_BOUND_S) for _ in range(MAX_CONNECTIONS + 44)]
    try:
        # when a client with the token asks
        status, doc = served.get_json("/api/v1/time")
        sockets = _server_sockets(served)
        let_go = [got for closed, got in map(_let_go, held) if closed]
    finally:
        for conn in held:
            conn.close()
    # then it is answered, where the pool was full of idle connections and it got a 503
    assert status == 200 and doc["timestamp_ns"] > 0, (status, doc)
    # and the server held a full pool, no more: room was made by letting the oldest idle ones go
    assert MAX_CONNECTIONS - OWN_SOCKETS <= sockets <= MAX_CONNECTIONS + OWN_SOCKETS, sockets
    assert len(let_go) >= len(held) + 1 - MAX_CONNECTIONS, len(let_go)
    for got in filter(None, let_go):  # a 503 in the API's shape, unless the close overtook it
        assert_error(parse(got), 503, "busy")


def test_connections_that_never_say_hello_past_the_handshake_cap_make_room(served: Server) -> None:
    # given a client opening more TCP connections than the server handshakes at once, and never saying hello
    before = _server_sockets(served)
    started = time.monotonic()
    silent = [socket.create_connection(("127.0.0.1", served.port), timeout=DROP_BOUND_S) for _ in range(400)]
    try:
        # when a client with the token asks (its connection queued behind all of them)
        status, _ = served.get_json("/api/v1/time")
        sockets = _server_sockets(served)
        asked_within_s = time.monotonic() - started
    finally:
        for conn in silent:
            conn.close()
    # then it is answered, and the server held no more handshakes than its cap, where it held all 400
    assert status == 200
    assert asked_within_s < TLS_HANDSHAKE_TIMEOUT_S, "too slow to tell: the handshake deadline let them go"
    assert sockets <= before + MAX_HANDSHAKES + OWN_SOCKETS, (before, sockets)
