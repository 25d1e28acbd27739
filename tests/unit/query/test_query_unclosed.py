"""`gpuscope query` notes on stderr when a recording was not closed; its data output stays machine-readable."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_gpuscope
from tests.unit.query.builder import build_db

SQL = "SELECT pid, count(*) AS n FROM events GROUP BY pid ORDER BY pid"
HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM sessions").fetchone()
print("ready", flush=True)
sys.stdin.readline()
"""


def _gone_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


def test_a_recording_whose_agent_died_gets_one_note_on_stderr_and_clean_csv(tmp_path: Path) -> None:
    # given a recording its agent never closed (killed), n calls one every ms
    db = build_db(tmp_path / "run.db", n=500, closed=False, agent_pid=_gone_pid())
    # when queried as CSV
    res = run_gpuscope("query", "--db", str(db), "--csv", SQL)
    # then stdout holds only the rows, and stderr one note: not closed, killed or crashed, complete up to when
    assert res.returncode == 0, res.stderr
    assert list(csv.DictReader(io.StringIO(res.stdout))) == [{"pid": "42", "n": "1000"}]
    (note,) = res.stderr.splitlines()
    assert note.startswith("note: ") and "not closed" in note and "killed or crashed" in note
    assert "2023-11-14T22:13:20.499Z" in note  # the end of its last stored call, 499 ms after the start


def test_the_note_is_the_sentence_explain_prints(tmp_path: Path) -> None:
    db = build_db(tmp_path / "run.db", n=500, closed=False, agent_pid=_gone_pid())
    note = run_gpuscope("query", "--db", str(db), "--json", SQL).stderr.strip().removeprefix("note: ")
    explained = run_gpuscope("explain", "--db", str(db))
    assert note and note in explained.stdout


def test_a_live_recording_is_noted_as_still_being_recorded_and_json_still_parses(tmp_path: Path) -> None:
    db = build_db(tmp_path / "run.db", n=500, closed=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with sqlite3.connect(db) as conn:  # the holder is the session's agent, as a running trace is
            conn.execute("UPDATE sessions SET agent_pid = ?", (holder.pid,))
        conn.close()
        res = run_gpuscope("query", "--db", str(db), "--json", SQL)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"pid": 42, "n": 1000}]
    (note,) = res.stderr.splitlines()
    assert f"still being recorded (gpuscope pid {holder.pid})" in note


def test_a_closed_recording_is_queried_without_a_note(tmp_path: Path) -> None:
    db = build_db(tmp_path / "run.db", n=500)
    res = run_gpuscope("query", "--db", str(db), "--csv", SQL)
    assert (res.returncode, res.stderr) == (0, "")


def test_a_recording_cut_short_by_a_full_disk_is_noted_with_its_stop(tmp_path: Path) -> None:
    db = build_db(tmp_path / "run.db", n=500)
    with sqlite3.connect(db) as conn:  # as the agent closes a session when the disk fills
        conn.execute("UPDATE sessions SET end_reason = 'disk full'")
    conn.close()
    res = run_gpuscope("query", "--db", str(db), "--csv", SQL)
    assert res.returncode == 0
    assert list(csv.DictReader(io.StringIO(res.stdout))) == [{"pid": "42", "n": "1000"}]
    (note,) = res.stderr.splitlines()
    assert "stopped early (disk full)" in note and "2023-11-14T22:13:20.500Z" in note
