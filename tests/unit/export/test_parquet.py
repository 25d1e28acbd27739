"""The Parquet dataset export: Hive layout, the documented schema, filters, and a session replaced whole."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from gpuscope.cli import main
from gpuscope.export.parquet import schema
from tests.unit.analysis.builder import Events, steady_training


def _recording(path: Path) -> Path:
    ev = Events()
    steady_training(ev, 50, pid=100)
    steady_training(ev, 30, pid=200)
    return ev.to_db(path)


def test_one_file_per_session_under_node_and_date_with_the_documented_schema(tmp_path: Path) -> None:
    db = _recording(tmp_path / "run.db")
    out = tmp_path / "ds"
    assert main(["export", "--db", str(db), "--format", "parquet", "-o", str(out)]) == 0
    (file,) = out.glob("node=*/date=*/*.parquet")
    assert file.parent.parent.name == "node=n" and file.parent.name == "date=2023-11-14"
    table = pq.read_table(file)
    assert table.schema.equals(schema())
    assert table.num_rows == 160
    assert table.column("time").to_pylist()[0].year == 2023


def test_filters_apply_and_a_second_export_replaces_the_session_file(tmp_path: Path, capsys) -> None:
    db = _recording(tmp_path / "run.db")
    out = tmp_path / "ds"
    assert main(["export", "--db", str(db), "--format", "parquet", "-o", str(out), "--pid", "200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 60 and len(doc["files"]) == 1
    assert main(["export", "--db", str(db), "--format", "parquet", "-o", str(out)]) == 0
    files = list(out.rglob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 160
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_stream_or_a_file_is_refused_as_the_target(tmp_path: Path, capsys) -> None:
    db = _recording(tmp_path / "run.db")
    assert main(["export", "--db", str(db), "--format", "parquet", "-o", "-"]) == 2
    (tmp_path / "file").write_text("x")
    assert main(["export", "--db", str(db), "--format", "parquet", "-o", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
