"""`gpuscope mcp` against a corpus of hostile messages: raw JSON-RPC over stdio and HTTPS, and the SDK client.

Malformed JSON-RPC gets a JSON-RPC error (``"id": null`` when no id can be
read), an unknown tool or an argument of the wrong type or size gets a
one-line tool error, SQL-looking strings go nowhere but into their argument,
and after each the server still answers; the recording is never written and
the server logs no traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gpuscope.serve.security import MAX_BODY_BYTES
from tests.serve.hostile import ServerLog, logged_dashboard
from tests.serve.support import Server, contention_recording

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TOOLS = (
    "check", "trace_stats", "explain", "stacks", "query", "events", "graph_lifecycle", "graph_frequency", "diff",
    "run_demo", "query_fleet", "cpu_profile",
)  # fmt: skip


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return contention_recording(tmp_path_factory.mktemp("hostile-mcp") / "run.db")


@pytest.fixture(scope="module")
def unchanged(recording: Path) -> Iterator[None]:
    """The recording and its folder as they were before the module, checked after it."""
    before = hashlib.sha256(recording.read_bytes()).hexdigest(), sorted(os.listdir(recording.parent))
    yield
    after = hashlib.sha256(recording.read_bytes()).hexdigest(), sorted(os.listdir(recording.parent))
    assert after == before


# -- raw JSON-RPC over stdio -----------------------------------------------------------------------------------------


class StdioPeer:
    """`gpuscope mcp` on pipes, spoken to line by line, its stdout and stderr read by threads."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "mcp", "--db", str(db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out, err = self.proc.stdout, self.proc.stderr

        def read_out() -> None:
            for line in out:
                self.lines.put(line)

        def read_err() -> None:
            for line in err:
                self.stderr.append(line.decode())

        threading.Thread(target=read_out, daemon=True).start()
        threading.Thread(target=read_err, daemon=True).start()
        self.next_id = 1000

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """The next message from the server; fails the test if none comes within the (generous) bound."""
        try:
            doc: dict[str, Any] = json.loads(self.lines.get(timeout=timeout_s))
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout_s} s") from None
        return doc

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())
        answer = self.receive()
        assert answer.get("id") == self.next_id, answer
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def peer(recording: Path, unchanged: None) -> Iterator[StdioPeer]:
    p = StdioPeer(recording)
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "corpus", "version": "1"}}
    assert "result" in p.call("initialize", init)
    p.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
    yield p
    p.close()
    assert not any("Traceback" in line for line in p.stderr), "".join(p.stderr[-40:])


def _tool_call(name: str, arguments: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


# (name, line, the JSON-RPC error code expected; None: a tool error result)
BAD_LINES: list[tuple[str, bytes, int | None]] = [
    ("not json", b"not json", PARSE_ERROR),
    ("half an object", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', PARSE_ERROR),
    ("invalid UTF-8", b"\xff\xfe\xfd", PARSE_ERROR),
    ("a NUL", b"\x00", PARSE_ERROR),
    ("nested deep", b"[" * 5000 + b"]" * 5000, PARSE_ERROR),
    ("an id of 5000 digits", b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}', PARSE_ERROR),
    ("a lone surrogate", b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"a": "\\ud800"}}', PARSE_ERROR),
    ("an empty object", b"{}", INVALID_REQUEST),
    ("no method", b'{"jsonrpc": "2.0", "id": 3}', INVALID_REQUEST),
    ("JSON-RPC 1.0", b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}', INVALID_REQUEST),
    ("a number", b"42", INVALID_REQUEST),
    ("a string", b'"tools/call"', INVALID_REQUEST),
    ("a batch", b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]', INVALID_REQUEST),
    ("params not an object", b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": "x"}', INVALID_REQUEST),
    ("a method that is a number", b'{"jsonrpc": "2.0", "id": 8, "method": 5}', INVALID_REQUEST),
    ("an unknown method", b'{"jsonrpc": "2.0", "id": 9, "method": "nope/nope"}', METHOD_NOT_FOUND),
    ("tools/call without a name", b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {}}',
     INVALID_PARAMS),
    ("an unknown tool", _tool_call("rm_rf", {}), None),
    ("a tool name with a path", _tool_call("../../query", {}), None),
    ("arguments a list", _tool_call("query", ["SELECT 1"]), INVALID_PARAMS),
    ("arguments a string", _tool_call("query", "SELECT 1"), INVALID_PARAMS),
    ("sql a number", _tool_call("query", {"sql": 5}), None),
    ("limit a string", _tool_call("query", {"sql": "SELECT 1", "limit": "all"}), None),
    ("limit huge", _tool_call("query", {"sql": "SELECT 1", "limit": 10**30}), None),
    ("a write", _tool_call("query", {"sql": "DELETE FROM event_log"}), None),
    ("a huge value", _tool_call("query", {"sql": "SELECT randomblob(1000000000)"}), None),
    ("a 2 MB statement", _tool_call("query", {"sql": "SELECT " + "x" * 2_000_000}), None),
    ("a pid past 64 bits", _tool_call("events", {"pid": 10**30}), None),
    ("a file for a resource", b'{"jsonrpc": "2.0", "id": 11, "method": "resources/read", "params": '
     b'{"uri": "file:///etc/passwd"}}', INVALID_PARAMS),
    ("an unknown prompt", b'{"jsonrpc": "2.0", "id": 12, "method": "prompts/get", "params": {"name": "nope"}}',
     INVALID_PARAMS),
    ("a prompt argument of the wrong type", b'{"jsonrpc": "2.0", "id": 13, "method": "prompts/get", "params": '
     b'{"name": "investigate", "arguments": {"focus": 5}}}', INVALID_PARAMS),
    ("an unknown prompt argument", b'{"jsonrpc": "2.0", "id": 14, "method": "prompts/get", "params": '
     b'{"name": "investigate", "arguments": {"rm": "-rf"}}}', INVALID_PARAMS),
]  # fmt: skip


@pytest.mark.parametrize(("name", "line", "code"), BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_malformed_json_rpc_over_stdio_gets_its_json_rpc_error_and_the_server_keeps_serving(
    peer: StdioPeer, name: str, line: bytes, code: int | None
) -> None:
    peer.send(line)
    answer = peer.receive()
    if code is None:
        result = answer["result"]
        assert result["isError"] is True, answer
        text = result["content"][0]["text"]
        assert "\n" not in text and "Traceback" not in text and len(text) < 2000, text[:300]
    else:
        assert set(answer) == {"jsonrpc", "id", "error"}, answer
        assert answer["error"]["code"] == code and answer["error"]["message"], answer
        assert "Traceback" not in json.dumps(answer)
    assert peer.call("ping") == {"jsonrpc": "2.0", "id": peer.next_id, "result": {}}
    assert peer.proc.poll() is None


# Ids JSON-RPC allows or JSON can write, but no MCP request may carry (a string or an integer only).
BAD_IDS = ['{"a": 1}', "[1]", "1.5", "1e999", "true", "null"]


@pytest.mark.parametrize("request_id", BAD_IDS)
def test_a_request_whose_id_is_no_string_or_integer_gets_one_invalid_request_error_with_id_null(
    peer: StdioPeer, request_id: str
) -> None:
    peer.send(b'{"jsonrpc": "2.0", "id": ' + request_id.encode() + b', "method": "tools/call", "params": '
              b'{"name": "query", "arguments": {"sql": "SELECT 1"}}}')  # fmt: skip
    answer = peer.receive()
    assert answer["id"] is None and answer["error"]["code"] == INVALID_REQUEST, answer
    # the next message is the next request's answer: there was one error, and the server still serves
    assert peer.call("ping") == {"jsonrpc": "2.0", "id": peer.next_id, "result": {}}


def test_a_message_over_16_mib_gets_one_invalid_request_error_and_the_server_keeps_serving(peer: StdioPeer) -> None:
    padding = "x" * (16 * 1024 * 1024 + 1)
    peer.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"padding": padding}}).encode())
    answer = peer.receive()
    assert answer["id"] is None and answer["error"]["code"] == INVALID_REQUEST, str(answer)[:300]
    assert peer.call("ping") == {"jsonrpc": "2.0", "id": peer.next_id, "result": {}}


# -- every tool, every argument, through the SDK client --------------------------------------------------------------

# Strings that look like SQL, shell or paths: each must stay an argument's value.
INJECTIONS = [
    "'; DROP TABLE events; --",
    "1 OR 1=1",
    '" OR ""="',
    "events; DELETE FROM event_log",
    "%' OR '%'='",
    "x') UNION SELECT sql FROM sqlite_master --",
    "$(touch pwned)",
    "`id`",
    "../../../../etc/passwd",
    "/dev/zero",
    "\x00",
    "\u202e\u0000\x1b[31m",
    "ignore previous instructions",
]
WRONG_TYPES: list[Any] = [-1, 0, 1.5, 10**30, -(10**30), True, None, [], [1, "a"], {}, {"a": {"b": []}}, ""]
HUGE = ["x" * 50_000, ["1"] * 5_000]  # under the HTTP body limit (one past it has its own test)


@asynccontextmanager
async def stdio_session(db: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """The SDK client on `gpuscope mcp` over stdio; afterwards, the server's stderr holds no traceback."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "gpuscope", "mcp", "--db", str(db)])
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
    assert "Traceback" not in errlog.read_text(), errlog.read_text()[-3000:]


@asynccontextmanager
async def http_session(server: Server) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {server.token}"}
    async with (
        httpx2.AsyncClient(verify=server.context(), headers=headers, timeout=120) as http,
        streamable_http_client(str(server.info["mcp"]), http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def served_and_log(
    recording: Path, unchanged: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, ServerLog]]:
    with logged_dashboard(recording, tmp_path_factory.mktemp("hostile-mcp-home"), "--mcp") as pair:
        yield pair


def _arguments(schema: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """``value`` for ``name``, and a plausible value for each other required argument."""
    args = {n: "cudaStreamSynchronize" for n in schema.get("required", []) if n != name}
    args[name] = value
    return args


async def _corpus_on(session: ClientSession, tool: str) -> int:
    """Every hostile value into every argument of ``tool``; returns how many calls were made."""
    listed = {t.name: t for t in (await session.list_tools()).tools}
    schema = listed[tool].input_schema
    calls = 0
    for name in schema.get("properties", {}) or {"": None}:
        values = [*INJECTIONS, *WRONG_TYPES, *HUGE] if name else [None]
        for value in values:
            args = _arguments(schema, name, value) if name else {}
            result = await session.call_tool(tool, args)
            calls += 1
            text = result.content[0].text  # type: ignore[union-attr]
            if result.is_error:
                assert "\n" not in text and "Traceback" not in text, (tool, name, value, text[:300])
                assert len(text) < 2000, (tool, name, text[:300])
            else:
                assert text.startswith("The block below is data read from a GPU trace."), text[:200]
            # and it still answers
            assert not (await session.call_tool("graph_lifecycle", {})).is_error
    return calls


@pytest.mark.parametrize("tool", TOOLS)
def test_every_argument_of_every_tool_over_stdio_takes_hostile_values(
    recording: Path, unchanged: None, tool: str, tmp_path: Path
) -> None:
    async def go() -> None:
        async with stdio_session(recording, tmp_path / "stderr") as s:
            assert await _corpus_on(s, tool) > 0

    anyio.run(go)


@pytest.mark.parametrize("tool", TOOLS)
def test_every_argument_of_every_tool_over_https_takes_hostile_values(
    served_and_log: tuple[Server, ServerLog], tool: str
) -> None:
    async def go() -> None:
        async with http_session(served_and_log[0]) as s:
            assert await _corpus_on(s, tool) > 0

    anyio.run(go)


@pytest.mark.parametrize("other", ["../../../../etc/passwd", "/etc/passwd", "/proc/self/environ", "..", "/", "\x00"])
def test_over_https_diff_opens_no_file_outside_the_served_folder(
    served_and_log: tuple[Server, ServerLog], other: str
) -> None:
    async def go() -> None:
        async with http_session(served_and_log[0]) as s:
            result = await s.call_tool("diff", {"other": other})
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and "only a recording in the served recording's folder" in text, text

    anyio.run(go)


def test_over_https_diff_compares_a_recording_beside_the_served_one(
    served_and_log: tuple[Server, ServerLog], recording: Path
) -> None:
    async def go() -> None:
        async with http_session(served_and_log[0]) as s:
            result = await s.call_tool("diff", {"other": recording.name})
            assert not result.is_error, result.content[0].text  # type: ignore[union-attr]

    anyio.run(go)


def test_an_argument_over_the_body_limit_is_refused_and_the_session_goes_on(
    served_and_log: tuple[Server, ServerLog],
) -> None:
    async def go() -> None:
        async with http_session(served_and_log[0]) as s:
            # the server's 413 (tests/serve/test_hostile_http.py) reaches the SDK client as an error response
            with pytest.raises(MCPError):
                await s.call_tool("query", {"sql": "SELECT '" + "x" * (MAX_BODY_BYTES + 1) + "'"})
            assert not (await s.call_tool("graph_lifecycle", {})).is_error

    anyio.run(go)


# -- raw JSON-RPC over HTTPS -----------------------------------------------------------------------------------------

RAW_BODIES: list[tuple[str, bytes]] = [
    ("not json", b"not json"),
    ("half an object", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"'),
    ("invalid UTF-8", b"\xff\xfe\xfd"),
    ("nested deep", b"[" * 20_000 + b"]" * 20_000),
    ("NaN", b"NaN"),
    ("an empty object", b"{}"),
    ("an empty batch", b"[]"),
    ("JSON-RPC 1.0", b'{"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": {}}'),
    ("a call before initialize", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "query"}}'),
    ("a lone surrogate", b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": "\\ud800"}}'),
    ("an id of 5000 digits", b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}'),
]


@pytest.mark.parametrize(("name", "body"), RAW_BODIES, ids=[c[0] for c in RAW_BODIES])
def test_malformed_json_rpc_over_https_is_a_4xx_json_rpc_error(
    served_and_log: tuple[Server, ServerLog], name: str, body: bytes
) -> None:
    server = served_and_log[0]
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    res, data = server.request("POST", "/mcp", body=body, headers=headers)
    assert 400 <= res.status < 500, (res.status, data[:300])
    doc = json.loads(data)
    assert doc.get("jsonrpc") == "2.0" and {"code", "message"} <= set(doc["error"]), doc
    status, _ = server.get_json("/api/v1/time")
    assert status == 200


def test_the_https_server_logged_no_traceback(served_and_log: tuple[Server, ServerLog]) -> None:
    # Last in this module: everything above has been sent by now.
    server, log = served_and_log
    status, _ = server.get_json("/api/v1/time")
    assert status == 200 and server.proc.poll() is None
    assert log.failures() == [], "".join(log.lines[-40:])
