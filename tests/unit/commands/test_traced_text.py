"""Names the traced programs chose are shown, never obeyed: explain, stacks, diff and query write their control
characters (terminal escapes, BEL, bidirectional overrides) as escapes, in a pipe as on a terminal."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.model.ops import Op
from gpuscope.model.printable import printable
from tests.terminal import Terminal, plain_environment  # noqa: F401 (an autouse fixture)
from tests.unit.analysis.builder import MS, US, Events, end_session, steady_training
from tests.unit.query.builder import build_db
from tests.unit.store.recordings import add_stack

# Clears the screen, rings, and reverses the rest of the line (shown as "exe.png").
HOSTILE = "\x1b[2J\x07\u202egnp.exe\x9b"
SHOWN = "\\x1b[2J\\x07\\u202egnp.exe\\x9b"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")
_COLOURS = re.compile(r"\x1b\[[\d;]*m")  # the styles rich writes on a terminal (SGR)


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training loop whose syncs a neighbour named HOSTILE preempts: explain names it in a finding."""
    ev = Events(comms={100: "train.py", 999: HOSTILE})
    for i, t in enumerate(steady_training(ev, n=120)):
        if i % 4 == 0:
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=999)
    db = ev.to_db(tmp_path_factory.mktemp("preempted") / "run.db")
    end_session(db, 121 * 10 * MS, recorded=len(ev.rows))
    return db


@pytest.fixture(scope="module")
def hostile_stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Calls whose process and whose stack's function are named HOSTILE."""
    db = build_db(tmp_path_factory.mktemp("stack") / "run.db", n=20)
    add_stack(db, 0x5EED, "alloc", [{"kind": "python", "function": HOSTILE, "file": "kv.py", "line": 2}])
    conn = sqlite3.connect(db)
    conn.execute("UPDATE event_log SET stack_hash = ?", (0x5EED,))
    conn.execute("UPDATE comms SET comm = ?", (HOSTILE,))
    conn.commit()
    conn.close()
    return db


def _printed(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty: bool) -> str:
    """What the command printed on stdout; on a terminal, without the colours it lays over the text."""
    capsys.readouterr()
    if not tty:
        assert main(argv) == 0
        return capsys.readouterr().out
    out = Terminal()
    with monkeypatch.context() as m:
        m.setattr(sys, "stdout", out)
        assert main(argv) == 0
    return _COLOURS.sub("", out.getvalue())


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
def test_explain_shows_a_hostile_process_name_as_escapes(
    tty: bool, preempted: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _printed(["explain", "--db", str(preempted)], capsys, monkeypatch, tty)
    assert SHOWN in text and not any(c in text for c in RAW), text


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
def test_diff_shows_a_hostile_op_name_as_escapes(
    tty: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given two recordings whose ops table was changed to name cudaMalloc HOSTILE
    a, b = build_db(tmp_path / "a.db", n=50), build_db(tmp_path / "b.db", n=50)
    for db in (a, b):
        conn = sqlite3.connect(db)
        conn.execute("UPDATE ops SET name = ? WHERE name = 'cudaMalloc'", (HOSTILE,))
        conn.commit()
        conn.close()
    # when / then
    text = _printed(["diff", str(a), str(b)], capsys, monkeypatch, tty)
    assert SHOWN in text and not any(c in text for c in RAW), text


def test_stacks_shows_a_hostile_function_name_as_escapes(
    hostile_stack: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _printed(["stacks", "--db", str(hostile_stack)], capsys, monkeypatch, False)
    assert SHOWN in text and not any(c in text for c in RAW), text


@pytest.mark.parametrize("raw", [False, True], ids=["readable", "raw"])
def test_a_query_table_shows_a_hostile_name_as_escapes_one_row_a_line(
    raw: bool, hostile_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "SELECT DISTINCT comm, comm || char(10) || 'x' AS two_lines FROM events"
    assert main(["query", "--db", str(hostile_stack), *(["--raw"] if raw else []), sql]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[2].split() == [SHOWN, SHOWN + "\\x0ax"]


def test_query_csv_shows_control_characters_as_escapes_and_keeps_its_newlines(
    hostile_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = f"SELECT DISTINCT comm, 'a' || char(10) || 'b' AS two_lines, comm AS \"{HOSTILE}\" FROM events"
    assert main(["query", "--db", str(hostile_stack), "--csv", sql]) == 0
    text = capsys.readouterr().out
    assert not any(c in text for c in RAW)
    assert list(csv.reader(io.StringIO(text))) == [["comm", "two_lines", SHOWN], [SHOWN, "a\nb", SHOWN]]


@pytest.mark.parametrize("fmt", ["--json", "--nl"])
def test_query_json_keeps_a_hostile_name_exact_and_writes_no_control_character_raw(
    fmt: str, hostile_stack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", "--db", str(hostile_stack), fmt, "SELECT DISTINCT comm FROM events"]) == 0
    text = capsys.readouterr().out
    assert not any(c in text for c in RAW), text
    rows = json.loads(text) if fmt == "--json" else [json.loads(line) for line in text.splitlines()]
    assert rows == [{"comm": HOSTILE}]
    assert printable(text, keep_lines=True) == text
