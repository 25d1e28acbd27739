"""`gpuscope explain` end to end on constructed databases, in process."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.model.ops import Op
from tests.other_user import as_nobody, open_folder

from .builder import MS, US, Events, steady_training


def _preempted_db(path: Path) -> Path:
    ev = Events(comms={100: "train", 999: "stress"})
    for i, t in enumerate(steady_training(ev, 400)):
        if i % 4 == 0:
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=999)
    return ev.to_db(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["explain", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_document_has_the_documented_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc["window"]) >= {"start_ns", "end_ns", "length_ns", "events"}
    f = doc["findings"][0]
    assert set(f) >= {"id", "severity", "kind", "symptom", "causes", "fix"}
    assert f["kind"] == "cpu-preemption"
    assert set(f["symptom"]) >= {"op", "pid", "p50_ns", "p99_ns"}
    cause = f["causes"][0]
    assert set(cause) == {"kind", "evidence", "effect", "culprits", "histogram"}
    assert cause["effect"]["p50_ratio"] > 10
    assert cause["culprits"][0]["pid"] == 999
    # the histogram holds the op's calls, the affected ones apart, as the effect size counts them
    hist = cause["histogram"]
    assert len(hist["edges_ns"]) == len(hist["affected"]) + 1 == len(hist["unaffected"]) + 1
    assert sum(hist["affected"]) == cause["effect"]["affected_calls"]
    assert sum(hist["unaffected"]) == cause["effect"]["unaffected_calls"]
    # and the span lies inside the window
    w = doc["window"]
    assert w["start_ns"] <= f["span"]["start_ns"] < f["span"]["end_ns"] <= w["end_ns"]


def test_since_counts_back_from_the_end_of_the_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # given a recording 4 s long, made long ago (monotonic timestamps far from now)
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json", "--since", "1s")
    w = json.loads(out)["window"]
    assert rc == 0
    assert w["end_ns"] == w["recording_end_ns"]
    assert w["length_ns"] == 1_000_000_000
    assert 0 < w["events"] < 1000


def test_from_to_select_offsets_from_the_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json", "--from", "1s", "--to", "2s")
    w = json.loads(out)["window"]
    assert (rc, w["start_ns"] - w["recording_start_ns"], w["length_ns"]) == (0, 1_000_000_000, 1_000_000_000)


def test_findings_are_appended_to_the_history_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _preempted_db(tmp_path / "t.db")
    for _ in range(2):
        assert _run(capsys, "--db", str(db), "--save-findings")[0] == 0
    rows = sqlite3.connect(db).execute("SELECT kind, severity, window_end_ns FROM findings").fetchall()
    assert len(rows) >= 2 and rows[0][0] == "cpu-preemption"


def test_a_read_only_database_still_gets_a_report_and_is_not_modified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        # root may write whatever the modes say: the reader here is the user nobody (tests.other_user)
        with open_folder("gpuscope-readonly-") as folder:
            db = _preempted_db(folder / "t.db")
            sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
            db.chmod(0o444)
            before = db.read_bytes()
            p = as_nobody([sys.executable, "-m", "gpuscope", "explain", "--db", str(db)], tmp_path / "home")
            assert p.returncode == 0 and "cpu-preemption" in p.stdout, p.stderr
            assert db.read_bytes() == before
        return
    db = _preempted_db(tmp_path / "t.db")
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    before = db.read_bytes()
    os.chmod(db, stat.S_IRUSR)
    os.chmod(tmp_path, stat.S_IRUSR | stat.S_IXUSR)
    try:
        rc, out, _ = _run(capsys, "--db", str(db))
    finally:
        os.chmod(tmp_path, stat.S_IRWXU)
        os.chmod(db, stat.S_IRUSR | stat.S_IWUSR)
    assert rc == 0 and "cpu-preemption" in out
    assert db.read_bytes() == before


def test_explain_leaves_the_recording_and_its_folder_exactly_as_they_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording with findings to report, checkpointed so the main file is complete
    db = _preempted_db(tmp_path / "t.db")
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    for side in ("t.db-wal", "t.db-shm"):
        (tmp_path / side).unlink(missing_ok=True)
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    # when it is explained, as text and as JSON
    assert _run(capsys, "--db", str(db))[0] == 0
    rc, out, _ = _run(capsys, "--db", str(db), "--json")
    # then the findings are reported and not one byte or timestamp changed; SQLite's WAL side
    # files may appear (every reader of a WAL database shares them) but hold no frame
    assert rc == 0 and json.loads(out)["stored"] is False
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before[:2]
    assert {p.name for p in tmp_path.iterdir()} <= {"t.db", "t.db-wal", "t.db-shm"}
    wal = tmp_path / "t.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert "findings" not in {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")} or (
        sqlite3.connect(db).execute("SELECT count(*) FROM findings").fetchone()[0] == 0
    )


def test_save_findings_reports_that_they_were_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json", "--save-findings")
    assert rc == 0 and json.loads(out)["stored"] is True


def test_empty_recording_says_no_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = Events().to_db(tmp_path / "e.db")
    rc, out, _ = _run(capsys, "--db", str(db))
    assert rc == 0 and "no findings" in out


def test_clean_recording_says_no_findings_with_the_stats_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = Events()
    steady_training(ev, 300)
    rc, out, _ = _run(capsys, "--db", str(ev.to_db(tmp_path / "c.db")), "--per-process")
    assert rc == 0 and "no findings" in out
    assert "cudaStreamSynchronize" in out and "pid 100" in out


def test_corrupt_database_is_one_line_error_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    rc, out, err = _run(capsys, "--db", str(bad))
    assert rc == 1 and out == ""
    assert err.startswith("error: ") and "Traceback" not in err


def test_missing_database_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "--db", str(tmp_path / "none.db"))
    assert rc == 1 and "no such database" in err


def test_database_without_event_tables_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE t(x)").close()
    rc, _, err = _run(capsys, "--db", str(db))
    assert rc == 1 and "not a gpuscope database" in err


def test_min_severity_filters_and_bad_levels_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json", "--min-severity", "critical")
    assert rc == 0 and all(f["severity"] == "CRITICAL" for f in json.loads(out)["findings"])
    assert _run(capsys, "--db", str(db), "--min-severity", "urgent")[0] == 2
    assert _run(capsys, "--db", str(db), "--since", "1s", "--from", "2s")[0] == 2


def test_pid_filter_restricts_the_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _preempted_db(tmp_path / "t.db")
    rc, out, _ = _run(capsys, "--db", str(db), "--json", "--pid", "12345")
    assert rc == 0 and json.loads(out)["findings"] == []
