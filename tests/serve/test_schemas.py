"""The answers' schemas in the OpenAPI document hold for real answers: the demo's recording, a profiled run, the host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gpuscope.serve.endpoints import ENDPOINTS
from gpuscope.serve.http_api import Api
from gpuscope.serve.openapi import openapi_spec
from gpuscope.serve.params import parse_query
from gpuscope.store.aggregates import insert_system_sample
from gpuscope.store.connect import connect_writer
from tests.demo_recording import every_scenario
from tests.serve.support import profile_recording
from tests.unit.analysis.builder import WALL0

# Windows and filters that change what an answer holds (an empty window, one process, only the worst findings).
QUERIES: list[dict[str, str]] = [
    {}, {"since": "1s"}, {"since": "1ns"}, {"pid": "100"}, {"min_severity": "critical"}, {"limit": "1"},
]  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every demo scenario recorded synthetically into one file, as `gpuscope demo --synthetic` does."""
    return every_scenario(tmp_path_factory.mktemp("schemas") / "demo.db")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with on-CPU samples and the host's once-a-second samples."""
    db = profile_recording(tmp_path_factory.mktemp("schemas") / "profiled.db")
    conn = connect_writer(db)
    for i in range(5):
        insert_system_sample(conn, 1, WALL0 + i * 1_000_000_000, None if i == 0 else 10.0 * i, 40.0, 2**30, 0, 1.5, 2)
    conn.close()
    return db


def _response_schema(path: str, method: str = "get") -> dict[str, Any]:
    schema: dict[str, Any] = openapi_spec()["paths"][f"/api/v1{path}"][method]["responses"]["200"]["content"][
        "application/json"
    ]["schema"]
    Draft202012Validator.check_schema(schema)
    return schema


def _errors(schema: dict[str, Any], answer: Any) -> list[str]:
    wire = json.loads(json.dumps(answer))  # as the client reads it
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in Draft202012Validator(schema).iter_errors(wire)
    ]


@pytest.mark.parametrize("recording", ["demo", "profiled"])
def test_every_answer_matches_the_schema_the_openapi_document_publishes(
    recording: str, request: pytest.FixtureRequest
) -> None:
    api = Api(request.getfixturevalue(recording))
    for ep in ENDPOINTS:
        schema = _response_schema(ep.path)
        for query in QUERIES:  # parameters an endpoint does not take are ignored, as over HTTP
            answer = ep.handler(api, **parse_query(ep.params, query))
            assert _errors(schema, answer) == [], (ep.path, query)


def test_the_answers_fill_what_their_schemas_describe(demo: Path, profiled: Path) -> None:
    # The lists whose rows the schemas type are not all empty: the check above has rows to check.
    demo_api, profiled_api = Api(demo), Api(profiled)
    assert demo_api.findings()["findings"] and demo_api.ops()["ops"] and demo_api.overview()["top_finding"]
    assert demo_api.events(limit=5)["events"] and demo_api.timeline()["series"] and demo_api.processes()["processes"]
    profile = profiled_api.profile()
    assert profile["top_functions"] and profile["stacks"]
    assert profiled_api.profile_speedscope()["profiles"] and profiled_api.snapshots()["snapshots"]


def test_a_query_answer_matches_its_schema(demo: Path) -> None:
    schema = _response_schema("/query", "post")
    answer = Api(demo).query("SELECT op, count(*) AS n, NULL AS x, 1.5 AS y FROM events GROUP BY op", 3)
    assert answer["truncated"] and _errors(schema, answer) == []


def test_every_answer_schema_types_its_top_level_properties_and_requires_them() -> None:
    for ep in ENDPOINTS:
        schema = _response_schema(ep.path)
        assert schema["type"] == "object" and schema["properties"], ep.path
        for name, prop in schema["properties"].items():
            assert {"type", "anyOf", "const", "enum"} & set(prop), (ep.path, name)
        assert set(schema["required"]) <= set(schema["properties"])


def test_a_schema_refuses_an_answer_of_another_shape() -> None:
    # The schemas say something: a count given as text, a missing list, a wrong row are each caught.
    ops = _response_schema("/ops")
    window = {
        "start_ns": 0, "end_ns": 1, "start_wall_ns": 0, "end_wall_ns": 1, "length_ns": 1, "recording_start_ns": 0,
        "recording_end_ns": 1, "session_ids": [1], "events": 1,
    }  # fmt: skip
    row = {
        "op": "cudaMalloc", "pid": None, "count": 1, "total_ns": 1, "p50_ns": 1, "p95_ns": 1, "p99_ns": 1,
        "max_ns": 1, "time_share": 0.5, "rate_per_s": 1.0,
    }  # fmt: skip
    good = {"window": window, "ops": [row], "notes": [], "sampling": None}
    assert _errors(ops, good) == []
    assert _errors(ops, {**good, "ops": [{**row, "count": "1"}]})
    assert _errors(ops, {k: v for k, v in good.items() if k != "ops"})
    assert _errors(_response_schema("/events"), {"events": [{"id": 1}], "next_after": None})
