"""--session N|last|all: every reader looks at the last run unless told otherwise, and says what it left out."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.errors import UsageError
from gpuscope.model.session_choice import EVERY_SESSION, LAST_RUN, SessionChoice, SessionScope
from gpuscope.query.filters import EventFilter
from gpuscope.query.guarded import open_reader
from gpuscope.recording import open_recording
from gpuscope.store.session_scope import choose_sessions
from tests.demo_recording import scenarios

SCENARIOS = ("cold-start", "memcpy-bottleneck", "incident")  # sessions 1, 2, 3 in this order


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three demo scenarios traced into one recording, one after another: three sessions of one node."""
    return scenarios(tmp_path_factory.mktemp("sessions") / "runs.db", SCENARIOS)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, check=False)


def _counts_by_session(db: Path, f: EventFilter) -> dict[int, int]:
    with open_reader(db, event_filter=f) as reader:
        result = reader.query("SELECT session_id, count(*) FROM events GROUP BY session_id")
        return {int(s): int(n) for s, n in result.rows}


@pytest.mark.parametrize(
    ("text", "scope", "number"),
    [("3", SessionScope.ONE, 3), ("last", SessionScope.LAST, None), ("ALL", SessionScope.ALL, None)],
)
def test_the_three_forms_are_read(text: str, scope: SessionScope, number: int | None) -> None:
    choice = SessionChoice.parse(text)
    assert (choice.scope, choice.session_id, choice.given) == (scope, number, True)
    assert str(choice) == text.lower()


@pytest.mark.parametrize("text", ["0", "-1", "x", "", "1.5", "2 3", "9" * 30])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a session number"):
        SessionChoice.parse(text)


def test_the_default_reads_the_last_run_and_names_the_others_in_one_line(three_runs: Path) -> None:
    # when a reader is given no --session
    assert _counts_by_session(three_runs, EventFilter()).keys() == {3}
    with open_reader(three_runs, event_filter=EventFilter()) as reader:
        note = reader.sessions_note()
    # then it reads session 3 alone, and says which sessions it left out and how to read them
    assert note == (
        "note: session 3 (the last run) of 3; also in this file: sessions 1–2 "
        "(--session all for every one, --session N for one)"
    )


def test_all_and_one_read_what_they_say_and_say_nothing_more(three_runs: Path) -> None:
    every = _counts_by_session(three_runs, EventFilter(sessions=EVERY_SESSION))
    assert every.keys() == {1, 2, 3}
    one = _counts_by_session(three_runs, EventFilter(sessions=SessionChoice.parse("2")))
    assert one == {2: every[2]}
    with open_reader(three_runs, event_filter=EventFilter(sessions=SessionChoice.parse("last"))) as reader:
        assert reader.sessions_note() is None  # asked for: nothing to mention


def test_a_session_the_file_does_not_hold_is_one_line_naming_the_ones_it_does(three_runs: Path) -> None:
    with pytest.raises(UsageError, match=r"--session 7: the recording has no such session \(it has sessions 1–3\)"):
        _counts_by_session(three_runs, EventFilter(sessions=SessionChoice.parse("7")))


def test_offsets_count_from_the_start_of_the_sessions_read(three_runs: Path) -> None:
    # given the first second of session 2, asked by an offset
    f = EventFilter.from_options(end="1s", sessions=SessionChoice.parse("2"))
    with open_reader(three_runs, event_filter=f) as reader:
        (first, last) = next(iter(reader.query("SELECT min(ts_ns), max(ts_ns) FROM events").rows))
    conn = open_recording(three_runs)
    try:
        (start,) = conn.execute("SELECT started_mono_ns FROM sessions WHERE id = 2").fetchone()
    finally:
        conn.close()
    # then the rows lie in the first second after session 2 started, not after the recording's start
    assert start <= first and last <= start + 1_000_000_000


def test_explain_analyses_the_last_run_and_says_so(three_runs: Path) -> None:
    last = explain_db(three_runs, ExplainOptions())
    assert last.window.session_ids == (3,) and last.window.part == "session 3"
    assert last.notes[0].startswith("note: session 3 (the last run) of 3")
    assert {f.kind for f in last.findings} & {"cpu-preemption"}, "the incident scenario's cause"
    # and session 1 alone is the cold-start scenario, not mixed with the others
    first = explain_db(three_runs, ExplainOptions(sessions=SessionChoice.parse("1")))
    assert first.findings[0].kind == "cold-start" and first.window.session_ids == (1,)
    assert first.window.start_ns < first.window.end_ns <= last.window.start_ns
    every = explain_db(three_runs, ExplainOptions(sessions=EVERY_SESSION))
    assert (
        every.window.session_ids == (1, 2, 3)
        and every.window.part is None
        and not any(n.startswith("note: session") for n in every.notes)
    )


def test_the_cli_readers_take_session_and_the_default_is_said_on_stderr(three_runs: Path) -> None:
    db = str(three_runs)
    p = _cli("explain", "--db", db)
    assert p.returncode == 0, p.stderr
    assert "the whole session 3" in p.stdout.splitlines()[0]
    assert "note: session 3 (the last run) of 3; also in this file: sessions 1–2" in p.stderr
    p = _cli("explain", "--db", db, "--session", "all", "--json")
    assert json.loads(p.stdout)["window"]["session_ids"] == [1, 2, 3] and "note: session" not in p.stderr
    p = _cli("query", "--db", db, "--session", "1", "--json", "SELECT DISTINCT session_id FROM events")
    assert json.loads(p.stdout) == [{"session_id": 1}], p.stdout
    p = _cli("stacks", "--db", db, "--cpu")
    assert "note: session 3 (the last run)" in p.stderr
    p = _cli("explain", "--db", db, "--session", "9")
    assert p.returncode == 2 and p.stderr.startswith("error: --session 9: the recording has no such session")
    assert "Traceback" not in p.stderr
    p = _cli("query", "--db", db, "--session", "first", "SELECT 1")
    assert p.returncode == 2 and "not a session number (1, 2, …), last" in p.stderr


def test_last_keeps_the_other_nodes_traced_at_the_same_time_together(tmp_path: Path, three_runs: Path) -> None:
    # given a merged recording: node-b traced beside the last run, and node-b's own earlier run
    db = tmp_path / "merged.db"
    db.write_bytes(three_runs.read_bytes())
    conn = sqlite3.connect(db)
    (start, stop) = conn.execute("SELECT started_wall_ns, stopped_wall_ns FROM sessions WHERE id = 3").fetchone()
    rows = [(10, "b-early", start - 10**12, start - 10**12 + 10**9), (11, "b-beside", start + 10**6, stop + 10**6)]
    for sid, uuid, wall0, wall1 in rows:
        conn.execute(
            "INSERT INTO sessions(id, uuid, node, started_wall_ns, started_mono_ns, stopped_wall_ns, stopped_mono_ns) "
            "VALUES (?, ?, 'node-b', ?, 5, ?, 6)",
            (sid, uuid, wall0, wall1),
        )
    conn.commit()
    conn.close()
    conn = open_recording(db)
    try:
        chosen = choose_sessions(conn, LAST_RUN)
    finally:
        conn.close()
    # then the last run is the node-b session that started last, with node-a's session 3 that ran beside it,
    # and neither node's earlier runs
    assert chosen.ids == (3, 11)
    assert chosen.note() == (
        "note: sessions 3, 11 (the last run) of 5; also in this file: sessions 1–2, 10 "
        "(--session all for every one, --session N for one)"
    )
