"""The API's parameter spec: one typed table read once from the query string, published in OpenAPI, shared by MCP."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from gpuscope.commands import _options
from gpuscope.errors import UsageError
from gpuscope.model.findings import Severity
from gpuscope.model.limits import PID_MAX, PID_MIN
from gpuscope.model.session_choice import LAST_RUN, SessionChoice, SessionScope
from gpuscope.model.times import TimePoint
from gpuscope.serve.endpoints import ENDPOINTS
from gpuscope.serve.http_api import Api
from gpuscope.serve.mcp_server import build_server
from gpuscope.serve.openapi import openapi_spec
from gpuscope.serve.params import DEFAULT_ROWS, MAX_ROWS, PID, Kind, parse_query, query_request
from tests.serve.support import contention_recording

BY_PATH = {ep.path: ep for ep in ENDPOINTS}


def _parameters(path: str) -> dict[str, dict[str, Any]]:
    get = openapi_spec()["paths"][f"/api/v1{path}"]["get"]
    return {p["name"]: p for p in get["parameters"]}


@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda ep: ep.path)
def test_each_endpoint_names_exactly_its_methods_keywords_with_the_same_defaults(ep: Any) -> None:
    signature = inspect.signature(ep.handler)
    keywords = {name: p.default for name, p in signature.parameters.items() if name != "self"}
    assert {p.keyword: p.default for p in ep.params} == keywords
    assert len({p.name for p in ep.params}) == len(ep.params)  # one parameter per name on the wire


def test_the_openapi_document_types_each_parameter_with_its_bounds_and_default() -> None:
    events, stacks, findings, timeline = (_parameters(p) for p in ("/events", "/stacks", "/findings", "/timeline"))
    assert events["pid"]["schema"] == {"type": "integer", "minimum": PID_MIN, "maximum": PID_MAX}
    assert events["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": MAX_ROWS, "default": DEFAULT_ROWS}
    assert events["after"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0}
    assert events["from"]["schema"]["type"] == "string" and "@1767323045" in events["from"]["schema"]["examples"]
    assert stacks["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}
    assert findings["since"]["schema"]["type"] == "string" and "30s" in findings["since"]["schema"]["examples"]
    assert findings["min_severity"]["schema"] == {
        "type": "string", "enum": ["low", "medium", "high", "critical"], "default": "low",
    }  # fmt: skip
    assert timeline["buckets"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 2000, "default": 120}
    # every integer parameter says its range; no parameter is left an untyped string
    for ep in ENDPOINTS:
        published = _parameters(ep.path)
        for p in ep.params:
            schema = published[p.name]["schema"]
            assert published[p.name]["description"] == p.meaning
            if p.kind is Kind.INT:
                assert schema["type"] == "integer" and {"minimum", "maximum"} <= set(schema), (ep.path, p.name)
            else:
                assert schema["type"] == "string" and ("examples" in schema or "enum" in schema or p.kind is Kind.STR)


def test_the_query_string_is_read_once_into_typed_arguments() -> None:
    # given a query string of every kind
    query = {"since": "1m30s", "pid": "100", "min_severity": "HIGH", "session": "2", "unknown": "ignored"}
    # when read with the findings endpoint's spec
    args = parse_query(BY_PATH["/findings"].params, query)
    # then the method gets nanoseconds, an int, a Severity and a SessionChoice
    assert args == {
        "since_ns": 90_000_000_000,
        "pid": 100,
        "min_severity": Severity.HIGH,
        "sessions": SessionChoice(SessionScope.ONE, 2, True),
    }
    # and without a session, the last run
    assert parse_query(BY_PATH["/findings"].params, {})["sessions"] == LAST_RUN
    timeline = parse_query(BY_PATH["/timeline"].params, {"from": "end-30s", "to": "@1767323045"})
    assert timeline["start"] == TimePoint(before_end_ns=30_000_000_000)
    assert timeline["end"] == TimePoint(wall_ns=1_767_323_045_000_000_000)
    events = parse_query(BY_PATH["/events"].params, {"from": "@1767323045", "op": "cudaMalloc"})
    assert events["from_wall_ns"] == 1_767_323_045_000_000_000 and events["op"] == "cudaMalloc"


def test_absent_and_empty_parameters_get_the_methods_defaults() -> None:
    for ep in ENDPOINTS:
        defaults = {p.keyword: p.default for p in ep.params}
        assert parse_query(ep.params, {}) == defaults
        assert parse_query(ep.params, {p.name: "" for p in ep.params}) == defaults


@pytest.mark.parametrize(
    ("path", "query", "message"),
    [
        ("/ops", {"pid": "abc"}, "pid=abc: not an integer"),
        ("/ops", {"pid": "0"}, f"pid=0: must be between 1 and {PID_MAX}"),
        ("/ops", {"pid": str(PID_MAX + 1)}, f"pid={PID_MAX + 1}: must be between 1 and {PID_MAX}"),
        ("/ops", {"since": "5 parsecs"}, "since=5 parsecs: not a duration ("),
        ("/events", {"limit": "0"}, f"limit=0: must be between 1 and {MAX_ROWS}"),
        ("/events", {"after": "-1"}, "after=-1: must be between 0 and"),
        ("/events", {"from": "90s"}, "from: give an absolute time here (ISO 8601 or @UNIX_SECONDS)"),
        ("/events", {"to": "soon"}, "to soon: not a time"),
        ("/findings", {"min_severity": "dire"}, "min_severity: unknown severity 'dire'"),
        ("/stacks", {"limit": "101"}, "limit=101: must be between 1 and 100"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_the_parameter(
    path: str, query: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError) as refused:
        parse_query(BY_PATH[path].params, query)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_a_query_body_takes_pids_within_the_clis_bound() -> None:
    assert query_request({"sql": "SELECT 1", "pids": [PID_MIN, PID_MAX]}).event_filter.pids == (PID_MIN, PID_MAX)
    for pids in ([0], [PID_MAX + 1], [2**63 - 1]):
        with pytest.raises(UsageError, match=f"from {PID_MIN} to {PID_MAX}"):
            query_request({"sql": "SELECT 1", "pids": pids})


def test_a_query_body_is_read_into_a_request_with_the_servers_limits() -> None:
    request = query_request({"sql": "SELECT 1", "limit": 5, "since": "30s", "timeout_s": 60})
    assert (request.sql, request.limit, request.event_filter.since_ns) == ("SELECT 1", 5, 30_000_000_000)
    assert request.timeout_s == 5.0  # never more than the server's


# -- one pid bound: the CLI's, the API's and MCP's ------------------------------------------------------------------


def test_the_pid_bound_is_the_clis_everywhere(tmp_path: Path) -> None:
    # the CLI reads --pid with the same constant
    # (names _options imports, read from it on purpose: it is the module --pid is parsed with)
    assert (_options.PID_MIN, _options.PID_MAX) == (PID.lo, PID.hi) == (1, 4_194_304)  # type: ignore[attr-defined]
    assert _options.pid_arg(str(PID_MAX)) == PID_MAX
    with pytest.raises(argparse.ArgumentTypeError, match="from 1 to 4,194,304"):
        _options.pid_arg(str(PID_MAX + 1))
    # the API
    with pytest.raises(UsageError) as api_refusal:
        parse_query(BY_PATH["/ops"].params, {"pid": str(PID_MAX + 1)})
    assert parse_query(BY_PATH["/ops"].params, {"pid": str(PID_MAX)})["pid"] == PID_MAX
    # MCP: every tool that takes a pid, with the API's words
    db = contention_recording(tmp_path / "run.db")
    too_big: dict[str, object] = {"pid": PID_MAX + 1}
    calls: list[tuple[str, dict[str, object]]] = [
        (tool, too_big) for tool in ("trace_stats", "cpu_profile", "events", "graph_lifecycle", "graph_frequency")
    ]
    calls += [("stacks", {"op": "cudaMalloc", **too_big}), ("explain", {"pids": [PID_MAX + 1]})]

    async def refusals() -> list[str]:
        texts = []
        async with Client(build_server(db)) as client:
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                assert result.is_error, tool
                texts.append(result.content[0].text)  # type: ignore[union-attr]
            assert not (await client.call_tool("graph_lifecycle", {"pid": PID_MAX})).is_error
        return texts

    for text in anyio.run(refusals):
        assert text.endswith(str(api_refusal.value)), text


def test_mcp_and_the_api_read_durations_and_times_alike(tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    api = Api(db)
    with pytest.raises(UsageError) as since:
        parse_query(BY_PATH["/ops"].params, {"since": "5 parsecs"})
    with pytest.raises(UsageError) as start:
        parse_query(BY_PATH["/events"].params, {"from": "end-5s"})

    async def refusals() -> tuple[str, str]:
        async with Client(build_server(db)) as client:
            a = await client.call_tool("trace_stats", {"since": "5 parsecs"})
            b = await client.call_tool("events", {"start": "end-5s"})
        return a.content[0].text, b.content[0].text  # type: ignore[union-attr]

    by_since, by_start = anyio.run(refusals)
    assert by_since.endswith(str(since.value)) and by_start.endswith(str(start.value))
    # and the typed call MCP makes is the one the page's query string becomes
    # (parsed values are typed by the parameter table, not per name: the server passes them on the same way)
    assert api.ops(since_ns=1_000_000_000) == api.ops(**parse_query(BY_PATH["/ops"].params, {"since": "1s"}))  # type: ignore[arg-type]
