"""`gpuscope mcp` over stdio against a client that sends and does not read: the server stops reading, not grows."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.serve.support import contention_recording
from tests.serve.test_mcp import FENCE

CALLS = 1_500
UNREAD_S = 10.0
# The server's growth while nobody reads, in MiB: generous beside the answers it may hold (16 requests in flight,
# 16 MiB queued), small beside what holding every answer costs (each about 190 kB of JSON).
MAX_GROWTH_MIB = 150
# Rows made by SQLite itself, so a call costs milliseconds whatever the recording holds.
MANY_ROWS = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 300) "
    "SELECT i, printf('%.600c', 'x') AS pad FROM n"
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return contention_recording(tmp_path_factory.mktemp("mcp-backpressure") / "run.db")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_client_that_sends_many_large_queries_and_does_not_read_stops_the_server_reading_not_growing(
    recording: Path,
) -> None:
    # given: an initialized server
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "mcp", "--db", str(recording)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout = proc.stdin, proc.stdout
    stderr: list[bytes] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr or []), daemon=True).start()
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        stdin.write(_line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
        stdin.flush()
        assert "result" in json.loads(stdout.readline())
        stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        rss_start = _rss_mib(proc.pid)

        # when: 1,500 queries of many rows are sent (by a thread: its writes block once the server stops reading),
        # and nothing is read for 10 s
        def send_calls() -> None:
            for i in range(1, CALLS + 1):
                arguments = {"sql": MANY_ROWS, "limit": 1000}
                params = {"name": "query", "arguments": arguments}
                stdin.write(_line({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}))
            stdin.close()  # end of input: the server answers what it read, then exits

        sender = threading.Thread(target=send_calls, daemon=True)
        sender.start()
        peak = rss_start
        deadline = time.monotonic() + UNREAD_S
        while time.monotonic() < deadline and peak - rss_start <= MAX_GROWTH_MIB:
            peak = max(peak, _rss_mib(proc.pid))
            time.sleep(0.2)

        # then: it grew by little; it kept the unsent calls waiting rather than reading them all
        assert peak - rss_start <= MAX_GROWTH_MIB, f"grew {peak - rss_start:.0f} MiB from {rss_start:.0f} MiB"
        assert sender.is_alive(), "the server read every call while its answers went unread"

        # and: once read, every call is answered once, with its rows, and the server exits at end of input
        answered: set[int] = set()
        for line in stdout:
            answer = json.loads(line)
            assert answer["jsonrpc"] == "2.0" and answer["id"] not in answered, str(answer)[:300]
            assert not answer["result"].get("isError"), str(answer)[:300]
            fenced = FENCE.search(answer["result"]["content"][0]["text"])
            assert fenced is not None and len(json.loads(fenced.group(2))["rows"]) == 300, str(answer)[:300]
            answered.add(answer["id"])
        assert answered == set(range(1, CALLS + 1))
        assert proc.wait(timeout=60) == 0
        assert b"Traceback" not in b"".join(stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
