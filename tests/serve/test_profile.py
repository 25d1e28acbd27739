"""The on-CPU profile over HTTPS and MCP: hot functions and their shares, the speedscope file, names kept as data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gpuscope.serve.http_api import Api
from gpuscope.serve.mcp_answers import MAX_PROFILE_FRAMES, compact_profile
from gpuscope.serve.profile import NO_SAMPLES, NONE_SELECTED
from gpuscope.stacks.profile import SPEEDSCOPE_SCHEMA
from tests.serve.support import (
    HOSTILE_FUNCTION,
    SAMPLE_HZ,
    Server,
    contention_recording,
    dashboard,
    profile_recording,
)
from tests.serve.test_mcp import FENCE, data


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("profile")
    with dashboard(profile_recording(root / "run.db"), root / "home", "--mcp") as server:
        yield server


def _is_error(doc: Any) -> bool:
    return isinstance(doc, dict) and set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}


def test_the_profile_names_the_hot_function_and_its_share_of_the_samples(served: Server) -> None:
    status, p = served.get_json("/api/v1/profile")
    assert status == 200, p
    # every figure says it is an estimate from samples taken at the recorded rate
    assert (p["hz"], p["samples"], p["estimate"]) == (SAMPLE_HZ, 40, True)
    assert p["estimated_cpu_s"] == round(40 / SAMPLE_HZ, 3)
    assert any("estimates" in n for n in p["notes"])
    assert p["top_functions"][0] == {
        "function": HOSTILE_FUNCTION, "file": "/home/user/train.py", "line": 42, "samples": 30, "share": 0.75,
    }  # fmt: skip
    assert p["top_functions"][1]["function"] == "default_collate" and p["top_functions"][1]["share"] == 0.25
    top = p["stacks"][0]
    assert (top["pid"], top["tid"], top["samples"], top["share"]) == (100, 100, 30, 0.75)
    assert top["frames"][0] == f"{HOSTILE_FUNCTION} (/home/user/train.py:42)"  # innermost first
    assert top["frames"][-1].startswith("_PyEval_EvalFrameDefault")


def test_the_window_the_process_and_the_limit_choose_the_samples(served: Server) -> None:
    # the last second of the recording holds only the collating thread's samples
    _, recent = served.get_json("/api/v1/profile?since=1s")
    assert recent["samples"] == 10 and [f["function"] for f in recent["top_functions"]] == ["default_collate"]
    _, mine = served.get_json("/api/v1/profile?pid=100&limit=1")
    assert mine["samples"] == 40 and len(mine["top_functions"]) == 1 and len(mine["stacks"]) == 1
    _, other = served.get_json("/api/v1/profile?pid=999")
    assert other["samples"] == 0 and other["top_functions"] == [] and other["notes"] == [NONE_SELECTED]


def test_the_speedscope_download_holds_one_profile_per_thread(served: Server) -> None:
    res, body = served.request("GET", "/api/v1/profile.speedscope")
    assert res.status == 200
    assert res.getheader("content-disposition") == 'attachment; filename="run.speedscope.json"'
    doc = json.loads(body)
    assert doc["$schema"] == SPEEDSCOPE_SCHEMA
    frames = doc["shared"]["frames"]
    assert HOSTILE_FUNCTION in {f["name"] for f in frames}
    assert [p["type"] for p in doc["profiles"]] == ["sampled", "sampled"]  # threads 100 and 101
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < len(frames) for stack in p["samples"] for i in stack)
    assert [sum(p["weights"]) for p in doc["profiles"]] == [30, 10]
    _, recent = served.get_json("/api/v1/profile.speedscope?since=1s")
    assert [sum(p["weights"]) for p in recent["profiles"]] == [10]


@pytest.mark.parametrize(
    "query",
    ["profile?pid=abc", "profile?pid=-1", "profile?since=5%20parsecs", "profile?limit=0", "profile?limit=101",
     "profile.speedscope?pid=abc", "profile.speedscope?since=soon"],
)  # fmt: skip
def test_bad_parameters_get_the_error_shape(served: Server, query: str) -> None:
    status, doc = served.get_json(f"/api/v1/{query}")
    assert status == 400 and _is_error(doc) and doc["error"]["code"] == "bad_request", doc


def test_a_recording_without_samples_answers_an_empty_profile_with_a_note(tmp_path: Path) -> None:
    api = Api(contention_recording(tmp_path / "run.db"))
    p = api.profile()
    assert (p["samples"], p["top_functions"], p["stacks"], p["notes"]) == (0, [], [], [NO_SAMPLES])
    assert api.profile_speedscope()["profiles"] == []


def _mcp_client(server: Server) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(verify=server.context(), headers={"Authorization": f"Bearer {server.token}"}, timeout=60)


def test_the_mcp_tool_returns_the_hot_function_as_fenced_data(served: Server) -> None:
    async def go() -> None:
        async with (
            _mcp_client(served) as http,
            streamable_http_client(str(served.info["mcp"]), http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            result = await s.call_tool("cpu_profile", {"limit": 1})
            text = result.content[0].text  # type: ignore[union-attr]
            # the recorded name only inside the untrusted-data fence
            assert HOSTILE_FUNCTION not in text.partition("<untrusted-data")[0] and FENCE.search(text)
            p = data(result)
            assert p["top_functions"] == [
                {"function": HOSTILE_FUNCTION, "file": "/home/user/train.py", "line": 42, "samples": 30, "share": 0.75}
            ]
            assert len(p["stacks"]) == 1 and p["estimate"] is True and p["hz"] == SAMPLE_HZ
            recent = data(await s.call_tool("cpu_profile", {"since": "1s", "pid": 100}))
            assert recent["samples"] == 10
            too_many = await s.call_tool("cpu_profile", {"limit": 1000})
            assert too_many.is_error and "limit" in too_many.content[0].text  # type: ignore[union-attr]

    anyio.run(go)


def test_the_mcp_tool_shows_only_the_innermost_frames_of_a_deep_stack() -> None:
    frames = [f"f{i}" for i in range(200)]
    answer = {
        "hz": 99, "samples": 5, "estimated_cpu_s": 0.05, "estimate": True, "top_functions": [], "notes": [],
        "stacks": [{"pid": 1, "tid": 1, "samples": 5, "share": 1.0, "frames": frames}],
    }  # fmt: skip
    [stack] = compact_profile(answer)["stacks"]
    assert stack["frames"] == frames[:MAX_PROFILE_FRAMES]
    assert stack["more_frames"] == 200 - MAX_PROFILE_FRAMES
