"""`gpuscope mcp` before the first trace, its tools' annotations, diff's time forms, and what --json prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from gpuscope.serve.endpoints import ENDPOINTS
from tests.serve.support import contention_recording, dashboard
from tests.serve.test_mcp import TOOLS, data, stdio_session

NEEDS_A_RECORDING = {"trace_stats", "explain", "cpu_profile", "events", "graph_lifecycle", "graph_frequency"}


def test_before_the_first_trace_the_server_starts_and_says_what_to_do(tmp_path: Path) -> None:
    # given no recording where the server is pointed (an assistant set up on a fresh machine)
    db = tmp_path / "none" / "gpuscope.db"

    async def go() -> None:
        async with stdio_session(db) as s:
            # then it initializes and lists every tool
            assert {t.name for t in (await s.list_tools()).tools} == TOOLS
            # the tools that need no recording work
            assert data(await s.call_tool("check", {}))["checks"]
            demo = data(await s.call_tool("run_demo", {"scenario": "cold-start"}))
            assert demo["findings"] and demo["expected"] == "cold-start"
            # and those that read one say there is none yet, and what to do, as tool errors
            for name in (*sorted(NEEDS_A_RECORDING), "query", "stacks", "diff"):
                args = {"sql": "SELECT 1"} if name == "query" else {"op": "cudaMalloc"} if name == "stacks" else {}
                if name == "diff":
                    args = {"a_from": "0s", "a_to": "1s", "b_from": "1s", "b_to": "2s"}
                result = await s.call_tool(name, args)
                text = result.content[0].text  # type: ignore[union-attr]
                assert result.is_error and f"no recording yet at {db}" in text and "run_demo" in text, (name, text)

    anyio.run(go)
    assert not db.exists() and not db.parent.exists()  # and nothing was created where it looked


def test_every_tool_says_truthfully_what_it_does_to_its_world(tmp_path: Path) -> None:
    async def go() -> None:
        async with stdio_session(tmp_path / "none.db") as s:
            tools = {t.name: t.annotations for t in (await s.list_tools()).tools}
        for name, hints in tools.items():
            assert hints is not None, name
            assert hints.destructive_hint is False and hints.idempotent_hint is True, name
            # run_demo writes (and removes) a scratch recording; query_fleet asks other machines
            assert hints.read_only_hint is (name != "run_demo"), name
            assert hints.open_world_hint is (name == "query_fleet"), name

    anyio.run(go)


def test_diff_takes_the_time_forms_every_command_takes(tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    start = json.loads(
        subprocess.run(
            [sys.executable, "-m", "gpuscope", "query", "--db", str(db), "--json", "SELECT min(wall_ns) AS w FROM events"],
            capture_output=True, text=True, check=True,
        ).stdout
    )[0]["w"] // 1_000_000_000  # fmt: skip

    async def go() -> None:
        async with stdio_session(db) as s:
            for a, b in (
                (("0s", "1s"), ("end-1s", "end-0s")),  # offsets from the start and the end
                ((f"@{start}", f"@{start + 1}"), (f"@{start + 1}", f"@{start + 2}")),  # Unix seconds
                (("2023-11-14T22:13:20Z", "2023-11-14T22:13:21Z"), ("1s", "2s")),  # ISO 8601
            ):
                args = {"a_from": a[0], "a_to": a[1], "b_from": b[0], "b_to": b[1]}
                assert "ops" in data(await s.call_tool("diff", args)), args
            bad = await s.call_tool("diff", {"a_from": "soon", "a_to": "1s", "b_from": "1s", "b_to": "2s"})
            assert bad.is_error and "--from soon: not a time" in bad.content[0].text  # type: ignore[union-attr]

    anyio.run(go)


def test_dashboard_json_prints_the_token_its_help_promises_and_the_api_url_answers(tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    with dashboard(db, tmp_path / "home") as server:
        assert server.info["token"] == server.token and len(server.info["token"]) >= 16
        # the API URL the banner prints lists the endpoints, as the endpoint table has them
        status, index = server.get_json("/api/v1/")
        assert status == 200, index
        listed = {(e["method"], e["path"]) for e in index["endpoints"]}
        assert listed == {("GET", f"/api/v1{ep.path}") for ep in ENDPOINTS} | {("POST", "/api/v1/query")}
        assert all(e["summary"] for e in index["endpoints"]) and index["openapi"] == "/api/v1/openapi.json"
        # and only with the token, as every other path under it
        assert server.get_json("/api/v1/", token=None)[0] == 401
