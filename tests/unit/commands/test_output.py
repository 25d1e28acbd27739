"""Output flags: one spelling on every command that prints rows or a report; machine formats own stdout."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from gpuscope.cli import main
from tests.unit.query.builder import build_db

FLAGS = ("--table", "--json", "--csv", "--nl")


def _formats_in_help(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    return {flag for flag in FLAGS if re.search(rf"\[?{flag}\b", usage)}


@pytest.mark.parametrize(
    ("command", "formats"),
    [
        ("query", set(FLAGS)),
        ("stacks", set(FLAGS)),
        ("diff", set(FLAGS)),
        ("explain", {"--table", "--json"}),
        ("check", {"--table", "--json"}),
        ("version", {"--table", "--json"}),
    ],
)
def test_each_command_offers_the_formats_it_can_print(
    command: str, formats: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _formats_in_help(command, capsys) == formats


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db", n=50)


def test_explain_json_prints_one_document_and_nothing_else_on_stdout(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "--db", str(db), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) >= {"window", "findings", "stats"}


def test_explain_prints_text_in_a_pipe_unless_json_is_asked_for(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # capsys is not a terminal: the report for people is the default there too, as for every command
    assert main(["explain", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert main(["explain", "--db", str(db), "--table"]) == 0
    assert capsys.readouterr().out == text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


@pytest.mark.parametrize("command", ["query", "stacks", "diff"])
def test_row_commands_print_their_table_in_a_pipe_and_json_only_when_asked(
    db: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "query": ["query", "--db", str(db), "SELECT count(*) AS n FROM events"],
        "stacks": ["stacks", "--db", str(db)],
        "diff": ["diff", str(db), str(db), "--no-findings"],
    }[command]
    # given stdout is not a terminal (capsys), when no format is named, then it is not JSON
    assert main(argv) == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(capsys.readouterr().out)
    # and with --json it is
    assert main([*argv, "--json"]) == 0
    json.loads(capsys.readouterr().out)


def test_the_output_flags_are_mutually_exclusive(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["explain", "--db", str(db), "--json", "--table"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_stacks_csv_is_only_the_csv_with_its_header(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stacks", "--db", str(db), "--csv"]) == 0
    out = capsys.readouterr().out
    assert list(csv.reader(io.StringIO(out))) == [
        ["stack_hash", "op", "calls", "share", "total_duration_ns", "call_site", "frames", "marker"]
    ]


def test_version_json_is_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--json"]) == 0
    assert {"version", "commit", "libbpf", "kernel"} <= set(json.loads(capsys.readouterr().out))
