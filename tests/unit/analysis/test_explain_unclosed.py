"""`gpuscope explain` says plainly when a recording was not closed, and up to when it is complete."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuscope.cli import main

from .builder import MS, WALL0, Events, S, commit_until, end_session, steady_training

HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM sessions").fetchone()
print("ready", flush=True)
sys.stdin.readline()
"""


def _db(tmp_path: Path, agent_pid: int | None) -> Path:
    ev = Events(comms={100: "train"})
    steady_training(ev, 300)
    return ev.to_db(tmp_path / "t.db", agent_pid=agent_pid)


def _explain(capsys: pytest.CaptureFixture[str], db: Path) -> tuple[dict[str, Any], str]:
    assert main(["explain", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["explain", "--db", str(db)]) == 0
    return doc, capsys.readouterr().out


def _gone_pid() -> int:
    """The pid of a process that has exited (nothing holds a file under it)."""
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that has the recording open through SQLite, as a running agent does, until the test ends."""
    db = _db(tmp_path, None)
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


def test_a_session_whose_agent_died_is_said_not_closed_with_the_time_it_is_complete_until(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording whose agent committed up to 2.5 s and then was killed
    db = _db(tmp_path, _gone_pid())
    commit_until(db, 2 * S + 500 * MS)
    # when explained
    doc, text = _explain(capsys, db)
    # then JSON and text say it was not closed, why, and up to when it can be trusted
    rec = doc["recording"]
    (s,) = rec["sessions"]
    assert rec["closed"] is False
    assert (s["state"], s["complete_until_wall_ns"], s["complete_until_from"]) == (
        "not closed",
        WALL0 + 2 * S + 500 * MS,
        "commit",
    )
    assert s["complete_until"] == "2023-11-14T22:13:22.500Z" == rec["complete_until"]
    assert "not closed" in text and "killed or crashed" in text and "2023-11-14T22:13:22.500Z" in text


def test_a_session_whose_agent_has_the_file_open_is_still_being_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], holder: subprocess.Popen[str]
) -> None:
    # given the recording held open by the process its session names as its agent
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET agent_pid = ? WHERE id = 1", (holder.pid,))
    conn.close()
    commit_until(db, 3 * S)
    # when explained
    doc, text = _explain(capsys, db)
    # then it is reported as live, complete up to its last commit
    (s,) = doc["recording"]["sessions"]
    assert s["state"] == "recording" and s["agent_pid"] == holder.pid
    assert "still being recorded" in text and f"pid {holder.pid}" in text
    assert "killed or crashed" not in text


def test_a_session_without_an_agent_pid_held_open_by_another_process_may_still_be_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], holder: subprocess.Popen[str]
) -> None:
    doc, text = _explain(capsys, tmp_path / "t.db")
    (s,) = doc["recording"]["sessions"]
    assert s["state"] == "recording" and s["agent_pid"] is None
    assert f"pid {holder.pid}" in text and "killed or crashed" not in text


def test_an_old_unclosed_session_without_a_commit_time_is_complete_up_to_its_last_stored_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path, _gone_pid())
    doc, text = _explain(capsys, db)
    (s,) = doc["recording"]["sessions"]
    last = max(r[0] + r[1] for r in _rows(db))
    assert (s["state"], s["complete_until_from"], s["complete_until_wall_ns"]) == (
        "not closed",
        "last event",
        WALL0 + last,
    )
    assert "last stored event" in text


def test_a_session_stopped_early_by_a_full_disk_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _db(tmp_path, _gone_pid())
    end_session(db, 2 * S, end_reason="disk full")
    doc, text = _explain(capsys, db)
    (s,) = doc["recording"]["sessions"]
    assert (s["state"], s["end_reason"], s["complete_until_wall_ns"]) == ("closed", "disk full", WALL0 + 2 * S)
    assert doc["recording"]["closed"] is True
    assert "stopped early (disk full)" in text and "2023-11-14T22:13:22.000Z" in text


def test_a_cleanly_stopped_recording_has_nothing_to_say_about_its_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path, _gone_pid())
    end_session(db, 3 * S + 100 * MS)
    doc, text = _explain(capsys, db)
    (s,) = doc["recording"]["sessions"]
    assert (s["state"], s["end_reason"]) == ("closed", "stopped")
    assert doc["recording"]["notes"] == []
    assert "Recording:" not in text


def _rows(db: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(db)
    try:
        return [(int(a), int(b)) for a, b in conn.execute("SELECT ts_ns, duration_ns FROM event_log")]
    finally:
        conn.close()


def _add_sessions(db: Path, count: int, *, closed: bool) -> None:
    """``count`` more sessions after the first, copies of it without events (closed or left open)."""
    conn = sqlite3.connect(db)
    try:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
        first = dict(zip(cols, conn.execute("SELECT * FROM sessions ORDER BY id LIMIT 1").fetchone(), strict=True))
        rows = []
        for i in range(count):
            d = {**first, "id": first["id"] + 1 + i, "uuid": f"copy-{i}"}
            if closed:
                d.update(stopped_wall_ns=d["started_wall_ns"] + 1, stopped_mono_ns=d["started_mono_ns"] + 1)
                d.update(end_reason="stopped")
            rows.append(tuple(d[c] for c in cols))
        conn.executemany(f"INSERT INTO sessions({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
        conn.commit()
    finally:
        conn.close()


def test_an_earlier_unclosed_session_is_complete_up_to_its_own_last_stored_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the session with the events left unclosed, then a later run that was closed
    db = _db(tmp_path, _gone_pid())
    _add_sessions(db, 1, closed=True)
    # when every session's state is read
    assert main(["explain", "--db", str(db), "--session", "all", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["recording"]["sessions"][0]
    # then the first is complete up to its own last event (read for every such session in one pass)
    last = max(r[0] + r[1] for r in _rows(db))
    assert (first["state"], first["complete_until_from"], first["complete_until_wall_ns"]) == (
        "not closed",
        "last event",
        WALL0 + last,
    )


def test_thousands_of_unclosed_sessions_cost_one_pass_and_a_note_of_a_few_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given 20,000 sessions left unclosed (a crafted file: one query a session made this quadratic)
    db = _db(tmp_path, _gone_pid())
    _add_sessions(db, 19_999, closed=False)
    # when query, explain and diff read it (each reads the sessions' states: one query a session made it quadratic,
    # and 50,000 sessions kept each busy past 10 minutes)
    for argv in (["query", "--db", str(db), "SELECT 1"], ["explain", "--db", str(db)]):
        assert main(argv) == 0, argv
        out, err = capsys.readouterr()
        # then the note names the newest few and counts the rest, in a few bounded lines
        note = "\n".join(line for line in (err + out).splitlines() if "not closed" in line)
        assert "19,996 earlier sessions (1–19996) were not closed or stopped early" in note, argv
        assert note.count("was not closed") == 4 and len(note) < 2_000, argv
    assert main(["diff", str(db), str(db)]) == 0
    assert "session 20000 (the last run) of 20000" in capsys.readouterr().err
