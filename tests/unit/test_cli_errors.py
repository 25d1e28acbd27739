"""Errors that reach the command line: one line, a fix where there is one, no traceback."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pytest

from gpuscope import cli
from gpuscope.commands import version
from gpuscope.errors import UsageError
from tests.unit.query.builder import build_db


def test_damage_found_mid_query_gets_the_salvage_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a command that meets a damaged page only while it reads (past the bounded check on open)
    def damaged(args: argparse.Namespace) -> int:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(version, "run", damaged)
    # when
    status = cli.main(["version"])
    # then
    err = capsys.readouterr().err
    assert status == 1
    assert err.splitlines() == [
        "error: database: database disk image is malformed",
        "  fix: the recording is damaged: salvage what is left with `sqlite3 FILE .recover | sqlite3 NEW.db` "
        "and read NEW.db",
    ]


def test_other_database_errors_stay_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def locked(args: argparse.Namespace) -> int:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(version, "run", locked)
    assert cli.main(["version"]) == 1
    assert capsys.readouterr().err.splitlines() == ["error: database: database is locked"]


def _changed(db: Path, statement: str, *params: object) -> Path:
    conn = sqlite3.connect(db)
    conn.execute(statement, params)
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("argv", [["explain"], ["query", "SELECT count(*) FROM events"]])
def test_a_session_pid_that_is_not_a_number_is_one_line_naming_the_file_and_the_value(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _changed(build_db(tmp_path / "run.db", n=10, agent_pid=4242), "UPDATE sessions SET agent_pid = 'abc'")
    status = cli.main([*argv, "--db", str(db)])
    err = capsys.readouterr().err.splitlines()
    assert status == 1
    assert (
        err[0] == f"error: {db}: is not as gpuscope wrote it (sessions row 1: agent_pid is 'abc' (str), not an integer)"
    )
    assert len(err) == 2 and err[1].startswith("  fix: ")


@pytest.mark.parametrize("argv", [["explain", "--json"], ["query", "--json", "SELECT count(*) AS n FROM events"]])
def test_session_json_nested_200000_deep_is_read_as_absent(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    db = _changed(build_db(tmp_path / "run.db", n=10), "UPDATE sessions SET flags = ?, drops = ?", deep, deep)
    status = cli.main([*argv, "--db", str(db)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(out)


def test_export_says_a_name_that_is_not_utf8_as_explain_does_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording whose process name was changed to bytes that are not UTF-8
    db = _changed(build_db(tmp_path / "run.db", n=10), "UPDATE comms SET comm = CAST(x'74726169ff6e' AS TEXT)")
    before = db.read_bytes()
    # when explain, then export (both formats), read it
    statuses = [cli.main(["explain", "--db", str(db)])]
    explained = capsys.readouterr().err.splitlines()
    for fmt, out in (("perfetto", tmp_path / "t.json"), ("parquet", tmp_path / "parquet")):
        statuses.append(cli.main(["export", "--db", str(db), "--format", fmt, "-o", str(out)]))
        # then each says it as explain does, with no SQLite message of its own
        assert capsys.readouterr().err.splitlines() == explained
    assert statuses == [1, 1, 1]
    assert explained[0].startswith(f"error: {db}: cannot read events (Could not decode to UTF-8 column 'comm'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db"] and db.read_bytes() == before


def test_query_of_text_that_is_not_utf8_says_so_and_how_to_read_its_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _changed(build_db(tmp_path / "run.db", n=10), "UPDATE comms SET comm = CAST(x'74726169ff6e' AS TEXT)")
    status = cli.main(["query", "--db", str(db), "SELECT DISTINCT comm FROM events"])
    err = capsys.readouterr().err.splitlines()
    assert status == 1
    assert err[0].startswith("error: a text value of the result is not UTF-8 (Could not decode to UTF-8 column")
    assert err[1] == "  fix: select that column's bytes instead: CAST(column AS BLOB) or hex(column)"
    assert cli.main(["query", "--db", str(db), "--json", "SELECT DISTINCT hex(comm) AS h FROM events"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"h": "74726169FF6E"}]


def test_an_error_quoting_control_characters_shows_them_as_escapes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def quoting(args: argparse.Namespace) -> int:
        raise UsageError("name \x1b]8;;http://x\x07ls\u202e", remedy="rename \x1b[2J it")

    monkeypatch.setattr(version, "run", quoting)
    assert cli.main(["version"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: name \\x1b]8;;http://x\\x07ls\\u202e",
        "  fix: rename \\x1b[2J it",
    ]
