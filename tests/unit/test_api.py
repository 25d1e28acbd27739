"""The Python API: gpuscope.open(path).events/findings/explain, plain rows without pandas, frames with it."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpuscope
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.errors import DatabaseError, UsageError
from gpuscope.model.findings import Finding
from gpuscope.model.ops import Op
from gpuscope.query import QueryRefusedError
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.conftest import run_gpuscope


def build_db(path: Path) -> Path:
    """pid 42: 1000 cudaMalloc + 1000 slow cudaStreamSynchronize, one each per ms; pid 77: 10 cudaMalloc."""
    conn = connect_writer(path)
    sid = create_session(conn, SessionInfo("u", "node-a", "h", "6.18", "0.1", "1.1", 10**18, 0, [], {}))
    w = EventWriter(conn, sid)
    for op, pid, n, dur in (
        (Op.cudaMalloc, 42, 1000, 1_000),
        (Op.cudaStreamSynchronize, 42, 1000, 900_000),
        (Op.cudaMalloc, 77, 10, 1_000),
    ):
        ev = np.zeros(n, dtype=EVENT_DTYPE)
        ev["ts_ns"] = np.arange(n) * 1_000_000 + (0 if op == Op.cudaMalloc else 10_000)
        ev["duration_ns"] = dur
        ev["pid"], ev["tid"], ev["op"] = pid, pid, int(op)
        ev["comm"] = b"train.py"
        w.put(ev)
    w.close()
    conn.close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db")


@pytest.fixture
def no_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend neither pandas nor polars is installed."""
    monkeypatch.setattr("gpuscope.api.available_frame", lambda: "rows")


def test_events_are_plain_dict_rows_without_a_dataframe_library(db: Path, no_frames: None) -> None:
    t = gpuscope.open(db)
    rows = t.events(op="cudaMalloc", limit=3)
    assert isinstance(rows, list) and len(rows) == 3
    assert rows[0]["op"] == "cudaMalloc" and rows[0]["ts_ns"] == 0 and rows[0]["node"] == "node-a"
    assert [r["ts_ns"] for r in rows] == sorted(r["ts_ns"] for r in rows)


def test_events_filter_by_since_op_and_pid(db: Path, no_frames: None) -> None:
    t = gpuscope.open(db)
    assert len(t.events()) == 2010
    assert len(t.events(since="100ms", op="cudaStreamSynchronize")) == 100
    assert len(t.events(since=0.1, op=["cudaMalloc", "cudaStreamSynchronize"], pid=42)) == 200
    assert {r["pid"] for r in t.events(pid=77)} == {77}
    assert t.events(start="0ms", end="5ms", op="cudaMalloc", pid=[42, 77]) == t.events(op="cudaMalloc", limit=12)


def test_explain_returns_the_finding_objects_the_cli_renders(db: Path) -> None:
    found = gpuscope.open(db).explain()
    assert all(isinstance(f, Finding) for f in found)
    cli = run_gpuscope("explain", "--db", str(db), "--json")
    assert cli.returncode == 0, cli.stderr
    assert [f.id for f in found] == [f["id"] for f in json.loads(cli.stdout)["findings"]]


def test_findings_are_one_flat_row_per_finding(db: Path, no_frames: None) -> None:
    t = gpuscope.open(db)
    rows = t.findings()
    assert [r["id"] for r in rows] == [f.id for f in t.explain()]
    for r in rows:
        assert r["severity"] in {"LOW", "MEDIUM", "HIGH", "CRITICAL"} and r["fix"]


def test_a_pandas_dataframe_comes_back_when_pandas_is_installed(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[list[Any], list[str]]] = []

    class FakeFrame:
        @classmethod
        def from_records(cls, records: list[Any], columns: list[str]) -> FakeFrame:
            made.append((records, columns))
            return cls()

    fake = types.ModuleType("pandas")
    fake.DataFrame = FakeFrame  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pandas", fake)
    monkeypatch.setattr("gpuscope.api.available_frame", lambda: "pandas")
    frame = gpuscope.open(db).query("SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY op")
    assert isinstance(frame, FakeFrame)
    assert made == [([("cudaMalloc", 1010), ("cudaStreamSynchronize", 1000)], ["op", "n"])]


def test_asking_for_a_missing_frame_library_names_the_extra(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars -> ImportError
    with pytest.raises(UsageError) as err:
        gpuscope.open(db).events(limit=1, frame="polars")
    assert "gpuscope[frames]" in err.value.remedy


def test_the_api_cannot_write_either(db: Path) -> None:
    before = db.read_bytes()
    with pytest.raises(QueryRefusedError):
        gpuscope.open(db).query("DELETE FROM event_log")
    assert db.read_bytes() == before


def test_opening_a_missing_file_fails_at_open_with_a_remedy(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError) as err:
        gpuscope.open(tmp_path / "nope.db")
    assert err.value.remedy
