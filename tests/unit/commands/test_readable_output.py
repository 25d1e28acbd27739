"""The table is the default everywhere, readable, whatever stdout is; machine formats are asked for by name."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.cli import main
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_ns
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.ingero_fixtures import ingero_fixture
from tests.unit.query.builder import MONO0, WALL0, build_db

WALL0_ISO = "2023-11-14T22:13:20.000000Z"  # WALL0 in ISO 8601


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db", n=1000)


def _two_sessions(path: Path) -> Path:
    """Two sessions of one call each at the same wall-clock instant, on monotonic clocks an hour apart."""
    conn = connect_writer(path)
    for i, mono in enumerate((MONO0, MONO0 + 3_600_000_000_000)):
        info = SessionInfo(f"u-{i}", f"node-{i}", "host", "6.18", "0.1", "1.1", WALL0, mono, ["x"], {})
        w = EventWriter(conn, create_session(conn, info))
        ev = np.zeros(1, dtype=EVENT_DTYPE)
        ev["ts_ns"], ev["duration_ns"], ev["pid"], ev["tid"], ev["op"] = mono, 2_000_000, 42, 43, int(Op.cudaMalloc)
        w.put(ev)
        w.close()
    conn.commit()
    conn.close()
    return path


def test_query_prints_a_table_in_a_pipe_unless_a_machine_format_is_asked_for(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given stdout is not a terminal (capsys), when no format is named
    assert not sys.stdout.isatty()
    assert main(["query", "--db", str(db), "SELECT count(*) AS n FROM events"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # then it is the table, with grouped digits, not JSON
    assert lines == ["n", "-----", "2,000"]


def test_query_table_shows_times_and_durations_for_people(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT ts_ns, wall_ns, duration_ns, pid FROM events ORDER BY id LIMIT 1"
    assert main(["query", "--db", str(db), sql]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[2].split() == [WALL0_ISO, WALL0_ISO, *fmt_ns(500).split(), "42"]
    assert out.err == ""


def test_raw_keeps_the_stored_numbers_in_the_table(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT ts_ns, duration_ns, count(*) AS n FROM events"
    assert main(["query", "--db", str(db), "--raw", sql]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == [str(MONO0), "500", "2000"]


@pytest.mark.parametrize("fmt", ["--json", "--nl"])
def test_machine_formats_keep_integer_nanoseconds(db: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "--db", str(db), fmt, "SELECT ts_ns, wall_ns, duration_ns FROM events LIMIT 1"]) == 0
    text = capsys.readouterr().out
    row = json.loads(text)[0] if fmt == "--json" else json.loads(text.splitlines()[0])
    assert row == {"ts_ns": MONO0, "wall_ns": WALL0, "duration_ns": 500}


def test_monotonic_times_of_several_sessions_are_converted_per_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _two_sessions(tmp_path / "two.db")
    # with session_id: each row on its own session's clock, so both read the same wall-clock instant
    assert main(["query", "--db", str(db), "SELECT session_id, ts_ns FROM events ORDER BY session_id"]) == 0
    out = capsys.readouterr()
    assert [line.split()[1] for line in out.out.splitlines()[2:]] == [WALL0_ISO, WALL0_ISO]
    assert "select session_id too" not in out.err  # (the sessions were left open: a note says that)
    # without it: the stored numbers, and a note on stderr that says how to get times
    assert main(["query", "--db", str(db), "SELECT ts_ns FROM events ORDER BY session_id"]) == 0
    out = capsys.readouterr()
    assert [line.strip() for line in out.out.splitlines()[2:]] == [f"{MONO0:,}", f"{MONO0 + 3_600_000_000_000:,}"]
    assert "select session_id too" in out.err


def test_no_output_option_says_it_is_the_default_in_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("query", "diff", "stacks", "explain", "check"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "in a pipe" not in text and "on a terminal" not in text, command
        assert "(the default)" in text, command


# -- --json on the commands that write a file ----------------------------------------------------


def test_import_json_is_one_object_describing_the_new_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "node.db"
    shutil.copyfile(ingero_fixture("sample-gpu-node-02.db"), src)
    out = tmp_path / "ours.db"
    assert main(["import", str(src), "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["output"] == str(out) and doc["source"] == str(src)
    assert doc["events"] == sum(doc["events_by_op"].values()) > 0
    assert doc["nodes"] == ["gpu-node-02"] and isinstance(doc["notes"], list)


def test_merge_json_is_one_object_with_inputs_nodes_and_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = build_db(tmp_path / "a.db", n=10)
    out = tmp_path / "cluster.db"
    argv = ["merge", str(a), "-o", str(out), "--clock-offset", "node-a=-3.2ms", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["output"] == str(out)
    assert doc["events"] == 20 and doc["events_by_node"] == {"node-a": 20}
    assert [(i["path"], i["kind"], i["sessions_added"], i["events"]) for i in doc["inputs"]] == [
        (str(a), "gpuscope", 1, 20)
    ]
    assert doc["clock_offsets"] == [{"node": "node-a", "offset_ns": -3_200_000, "source": "manual"}]
    assert "merged into" not in captured.out + captured.err


def test_export_json_is_one_object_with_counts_and_notes(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.json"
    assert main(["export", "--db", str(db), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["output"] == str(out) and doc["recording"] == str(db) and doc["format"] == "perfetto"
    assert doc["events_written"] == 2000 and doc["events_cut"] == 0
    assert any("no finding markers" in n for n in doc["notes"])
    assert captured.err == ""  # the notes are in the object, not said twice
    assert json.loads(out.read_text())["traceEvents"]


def test_export_json_to_stdout_is_refused_before_any_work(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--db", str(db), "-o", "-", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "fix: write the trace to a file" in captured.err
