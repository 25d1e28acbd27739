"""The dashboard API and MCP read the last run by default, and any session or all of them when asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.demo_recording import scenarios
from tests.serve.support import Server, dashboard
from tests.serve.test_mcp import data, stdio_session

# Session 1 is the cold-start scenario, session 2 the incident (a CPU hog preempting the loop).
SCENARIOS = ("cold-start", "incident")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenarios(tmp_path_factory.mktemp("two-runs") / "runs.db", SCENARIOS)


@pytest.fixture(scope="module")
def served(two_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with dashboard(two_runs, tmp_path_factory.mktemp("home")) as server:
        yield server


def test_the_api_reads_the_last_run_by_default_and_says_what_it_left_out(served: Server) -> None:
    status, o = served.get_json("/api/v1/overview")
    assert status == 200
    assert o["window"]["session_ids"] == [2] and [s["id"] for s in o["sessions"]] == [1, 2]
    assert "note: session 2 (the last run) of 2; also in this file: session 1" in o["notes"][0]
    assert o["top_finding"]["kind"] == "cpu-preemption"


def test_the_api_reads_one_session_or_all_when_asked(served: Server) -> None:
    _, one = served.get_json("/api/v1/findings?session=1")
    assert one["window"]["session_ids"] == [1] and one["findings"][0]["kind"] == "cold-start"
    _, every = served.get_json("/api/v1/ops?session=all")
    assert every["window"]["session_ids"] == [1, 2]
    _, last = served.get_json("/api/v1/ops")
    count = {o["op"]: o["count"] for o in last["ops"]}
    assert {o["op"]: o["count"] for o in every["ops"]}["cudaStreamSynchronize"] > count["cudaStreamSynchronize"]
    _, timeline = served.get_json("/api/v1/timeline?session=1")
    _, whole = served.get_json("/api/v1/timeline?session=all")
    assert whole["start_wall_ns"] <= timeline["start_wall_ns"] < timeline["end_wall_ns"] <= whole["end_wall_ns"]


def test_the_query_body_takes_a_session(served: Server) -> None:
    body = json.dumps({"sql": "SELECT DISTINCT session_id FROM events", "session": "1"}).encode()
    res, raw = served.request("POST", "/api/v1/query", body=body, headers={"Content-Type": "application/json"})
    assert res.status == 200 and json.loads(raw)["rows"] == [[1]]
    body = json.dumps({"sql": "SELECT DISTINCT session_id FROM events"}).encode()
    res, raw = served.request("POST", "/api/v1/query", body=body, headers={"Content-Type": "application/json"})
    assert json.loads(raw)["rows"] == [[2]]


@pytest.mark.parametrize(
    ("query", "message"),
    [("session=7", "the recording has no such session (it has sessions 1–2)"), ("session=first", "not a session")],
)
def test_a_bad_session_is_a_400_in_the_error_shape(served: Server, query: str, message: str) -> None:
    status, doc = served.get_json(f"/api/v1/findings?{query}")
    assert status == 400 and message in doc["error"]["message"], doc


def test_mcp_tools_take_a_session(two_runs: Path) -> None:
    async def go() -> None:
        async with stdio_session(two_runs) as s:
            last = data(await s.call_tool("explain", {}))
            assert last["findings"][0]["kind"] == "cpu-preemption"
            assert last["notes"][0].startswith("note: session 2 (the last run) of 2")
            first = data(await s.call_tool("explain", {"session": "1"}))
            assert first["findings"][0]["kind"] == "cold-start"
            rows = data(await s.call_tool("query", {"sql": "SELECT DISTINCT session_id FROM events", "session": "all"}))
            assert sorted(r[0] for r in rows["rows"]) == [1, 2]
            bad = await s.call_tool("trace_stats", {"session": "0"})
            assert bad.is_error and "not a session number" in bad.content[0].text  # type: ignore[union-attr]

    anyio.run(go)
