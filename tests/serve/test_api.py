"""The JSON API: every endpoint of its OpenAPI spec answers, with hostile input too, and never with a 500."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gpuscope.serve.endpoints import ENDPOINTS
from tests.serve.support import HOSTILE_COMM, Server, contention_recording, dashboard

# Values a fuzzer would try first: empty, signs, huge, fractions, SQL, markup, unicode, NUL, a very long string.
HOSTILE = [
    "", "-1", "0", "1", "1e309", "9" * 40, "0.5", "abc", "'; DROP TABLE events; --", "<svg onload=1>",
    "%00", "\u202e", "1m30s", "end-5s", "@1700000000", "2026-13-45T99:99:99Z", "x" * 5000,
]  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("api")
    with dashboard(contention_recording(root / "run.db"), root / "home") as server:
        yield server


@pytest.fixture(scope="module")
def spec(served: Server) -> dict[str, Any]:
    status, doc = served.get_json("/api/v1/openapi.json")
    assert status == 200
    return doc


def _is_error(doc: Any) -> bool:
    return isinstance(doc, dict) and set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}


def test_the_spec_names_every_route_and_only_those(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    expected = {f"/api/v1{e.path}" for e in ENDPOINTS} | {"/api/v1/query"}
    assert set(spec["paths"]) == expected
    assert {
        "time", "overview", "ops", "findings", "snapshots", "capabilities", "graph_metrics", "graph_events", "profile",
        "profile_speedscope",
    } <= {op["operationId"] for path in spec["paths"].values() for op in path.values()}  # fmt: skip


def test_every_get_endpoint_answers_200_with_json(served: Server, spec: dict[str, Any]) -> None:
    for path, item in spec["paths"].items():
        if "get" in item:
            status, doc = served.get_json(path)
            assert status == 200, (path, doc)
            assert isinstance(doc, dict)


def test_hostile_parameters_get_200_or_the_error_shape_never_a_500(served: Server, spec: dict[str, Any]) -> None:
    seen: set[int] = set()
    for path, item in spec["paths"].items():
        for param in item.get("get", {}).get("parameters", []):
            for value in HOSTILE:
                res, body = served.request("GET", f"{path}?{param['name']}={quote(value)}")
                seen.add(res.status)
                assert res.status < 500 or res.status == 503, (path, param["name"], value, body[:200])
                doc = json.loads(body)
                assert res.status == 200 or _is_error(doc), (path, param["name"], value, doc)
    assert 400 in seen  # the corpus does reach the validation


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "bad_json"),
        (b"[1, 2]", "bad_json"),
        (b'{"sql": 5}', "bad_request"),
        (b'{"sql": ""}', "bad_request"),
        (b'{"sql": "SELECT 1", "limit": 0}', "bad_request"),
        (b'{"sql": "SELECT 1", "limit": true}', "bad_request"),
        (b'{"sql": "SELECT 1", "limit": 100000}', "bad_request"),
        (b'{"sql": "SELEC 1"}', "bad_sql"),
        (b'{"sql": "SELECT * FROM no_such_table"}', "bad_sql"),
        (
            b'{"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"}',
            "timeout",
        ),
    ],
)
def test_bad_query_bodies_get_the_error_shape(served: Server, body: bytes, code: str) -> None:
    res, data = served.request("POST", "/api/v1/query", body=body)
    doc = json.loads(data)
    assert _is_error(doc) and doc["error"]["code"] == code, doc
    assert res.status == (503 if code == "timeout" else 400)


def test_unknown_routes_and_methods_get_the_error_shape(served: Server) -> None:
    for method, path, status in (
        ("GET", "/api/v1/nope", 404),
        ("GET", "/static/../../etc/passwd", 404),
        ("GET", "/static/secret.py", 404),
        ("DELETE", "/api/v1/ops", 405),
        ("GET", "/api/v1/query", 405),
        ("POST", "/api/v1/ops", 405),
    ):
        res, data = served.request(method, path)
        assert res.status == status, (method, path)
        assert _is_error(json.loads(data))


def test_ops_and_findings_are_explains(served: Server) -> None:
    _, ops = served.get_json("/api/v1/ops")
    by_op = {o["op"]: o for o in ops["ops"]}
    assert by_op["cudaStreamSynchronize"]["count"] == 400
    assert {"p50_ns", "p95_ns", "p99_ns", "max_ns", "time_share", "rate_per_s"} <= set(by_op["cudaLaunchKernel"])
    _, findings = served.get_json("/api/v1/findings")
    top = findings["findings"][0]
    assert top["kind"] == "cpu-preemption" and top["symptom"]["comm"] == HOSTILE_COMM and top["fix"]
    _, recent = served.get_json("/api/v1/ops?since=1s")
    assert recent["window"]["length_ns"] == 1_000_000_000


def test_events_page_through_the_whole_recording(served: Server) -> None:
    seen, after = 0, 0
    while True:
        _, page = served.get_json(f"/api/v1/events?limit=300&after={after}")
        seen += len(page["events"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    _, counts = served.request("POST", "/api/v1/query", body=b'{"sql": "SELECT count(*) FROM events"}')
    assert seen == json.loads(counts)["rows"][0][0]


def test_processes_show_the_traced_name_as_data(served: Server) -> None:
    _, procs = served.get_json("/api/v1/processes")
    assert HOSTILE_COMM in {p["comm"] for p in procs["processes"]}


def test_the_time_endpoint_reads_no_recording(tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    with dashboard(db, tmp_path / "home") as server:
        db.unlink()
        status, doc = server.get_json("/api/v1/time")
        assert status == 200 and doc["timestamp_ns"] > 0
        status, doc = server.get_json("/api/v1/ops")
        assert status == 503 and _is_error(doc)


def test_the_report_and_the_time_views_of_the_page_read_the_windows_events_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.analysis.engine as engine_module
    import gpuscope.serve.time_views as views_module
    from gpuscope.serve.http_api import Api

    db = contention_recording(tmp_path / "run.db")
    from gpuscope.analysis.frame import load_frame as real

    reads: list[tuple[int, int]] = []

    def counted(conn: Any, start_ns: int, end_ns: int, *args: Any) -> Any:
        reads.append((start_ns, end_ns))
        return real(conn, start_ns, end_ns, *args)

    monkeypatch.setattr(views_module, "load_frame", counted)
    monkeypatch.setattr(engine_module, "load_frame", counted)
    api = Api(db)
    # the first screen: the last run's report, its timeline and its lanes
    overview = api.overview()
    api.timeline()
    lanes = api.lanes(width=300)
    # one read of the window served them all, and the answers are those of separate reads
    assert len(reads) == 1, reads
    assert overview["finding_counts"] == Api(db).overview()["finding_counts"]
    assert lanes["lanes"] and len(lanes["lanes"][0]["gpu"]) == 300


def test_explain_is_shared_by_a_page_refresh_and_redone_when_the_recording_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.serve.http_api as api_module
    from gpuscope.analysis.engine import ExplainOptions, Report, explain_db
    from gpuscope.serve.http_api import Api
    from gpuscope.store.connect import connect_writer

    db = contention_recording(tmp_path / "run.db")
    runs: list[object] = []

    def counted(path: str | os.PathLike[str], opts: ExplainOptions, frames: Any = None) -> Report:
        runs.append(opts)
        return explain_db(path, opts, frames)  # the function http_api imported and calls by its own name

    monkeypatch.setattr(api_module, "explain_db", counted)
    api = Api(db)
    # overview, ops and findings of one window: one explain
    first = api.ops()
    api.findings()
    api.overview()
    assert len(runs) == 1
    # another window: its own
    api.ops(since_ns=1_000_000_000)
    assert len(runs) == 2
    # the recording grows (as while `trace` writes): the next read sees the new rows
    conn = connect_writer(db)
    conn.execute(
        "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
        "bytes, handle, stream, arg0, arg1) SELECT session_id, ts_ns + 1, duration_ns, pid, tid, comm_id, cgroup_id, "
        "op_id, flags, ret, bytes, handle, stream, arg0, arg1 FROM event_log"
    )
    conn.close()
    again = api.ops()
    assert len(runs) == 3
    assert again["window"]["events"] > first["window"]["events"]


def test_snapshots_are_the_recorded_host_samples(tmp_path: Path) -> None:
    from gpuscope.serve.http_api import Api
    from gpuscope.store.aggregates import insert_system_sample
    from gpuscope.store.connect import connect_writer
    from tests.unit.analysis.builder import WALL0

    db = contention_recording(tmp_path / "run.db")
    assert Api(db).snapshots()["snapshots"] == []
    conn = connect_writer(db)
    for i in range(10):
        insert_system_sample(conn, 1, WALL0 + i * 1_000_000_000, None if i == 0 else 10.0 * i, 40.0, 2**30, 0, 1.5, 2)
    conn.close()
    every = Api(db).snapshots()
    assert every["source"] == "recorded" and [s["cpu_pct"] for s in every["snapshots"]][:3] == [None, 10.0, 20.0]
    last = Api(db).snapshots(since_ns=2_000_000_000)["snapshots"]
    assert [s["wall_ns"] for s in last] == [WALL0 + i * 1_000_000_000 for i in (7, 8, 9)]


def test_non_finite_numbers_come_back_as_text_not_a_500(served: Server) -> None:
    res, data = served.request("POST", "/api/v1/query", body=b'{"sql": "SELECT 1e999 AS a, -1e999 AS b, 0.5 AS c"}')
    assert res.status == 200, data
    assert json.loads(data)["rows"] == [["inf", "-inf", 0.5]]


def test_every_answer_on_the_wire_matches_the_schema_the_served_spec_publishes(
    served: Server, spec: dict[str, Any]
) -> None:
    from jsonschema import Draft202012Validator

    for path, item in spec["paths"].items():
        if "get" in item:
            status, doc = served.get_json(path)
            schema = item["get"]["responses"]["200"]["content"]["application/json"]["schema"]
            errors = [e.message for e in Draft202012Validator(schema).iter_errors(doc)]
            assert status == 200 and errors == [], (path, errors[:3])


def test_a_pid_past_the_clis_bound_is_a_400_that_says_the_bound(served: Server, spec: dict[str, Any]) -> None:
    from gpuscope.model.limits import PID_MAX

    (pid,) = [p for p in spec["paths"]["/api/v1/ops"]["get"]["parameters"] if p["name"] == "pid"]
    assert pid["name"] == "pid" and pid["schema"]["maximum"] == PID_MAX
    status, doc = served.get_json(f"/api/v1/ops?pid={PID_MAX + 1}")
    assert status == 400 and doc["error"]["message"] == f"pid={PID_MAX + 1}: must be between 1 and {PID_MAX}"
    status, _ = served.get_json(f"/api/v1/ops?pid={PID_MAX}")
    assert status == 200
