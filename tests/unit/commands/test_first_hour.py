"""The first hour of a new user: durations and times everywhere, flags as they type them, completion, guides."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.cli import COMMANDS, build_parser, main
from gpuscope.commands._options import timeout_from_args
from gpuscope.model.units import parse_duration_ns
from gpuscope.platform.invocation import invocation
from gpuscope.render.docs import docs_dir, topics
from tests.other_user import as_nobody
from tests.unit.query.builder import build_db

REPO = Path(__file__).resolve().parents[3]
DURATIONS = ["500us", "500µs", "2ms", "1.5", "30s", "5m", "5min", "1m30s", "1h2m3.5s", "250ns", "1d"]
TIMES = ["100ms", "+100ms", "end-200ms", "-200ms", "@1700000000.5", "1700000000.5", "2023-11-14T22:13:20.5Z"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db")


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _subparser(name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand, as ``build_parser(name)`` holds it."""
    subparsers = build_parser(name)._subparsers
    assert subparsers is not None
    action = subparsers._group_actions[0]
    assert isinstance(action, argparse._SubParsersAction), action
    return action.choices[name]


@pytest.mark.parametrize("text", DURATIONS)
def test_every_duration_form_is_taken_by_every_duration_option(
    db: Path, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --since of explain, query, export and diff; stacks --min-duration; query --timeout; export --counter-interval
    assert main(["explain", "--db", str(db), "--since", text]) == 0
    assert main(["query", "--db", str(db), "--since", text, "SELECT 1"]) == 0
    assert timeout_from_args(text) == parse_duration_ns(text) / 1e9  # query --timeout
    assert main(["stacks", "--db", str(db), "--min-duration", text]) == 0
    out = tmp_path / "t.json"
    assert main(["export", "--db", str(db), "--since", text, "--counter-interval", text, "-o", str(out)]) == 0
    assert main(["diff", str(db), str(db), "--since", text, "--no-findings"]) == 0
    assert "not a duration" not in capsys.readouterr().err


@pytest.mark.parametrize("text", TIMES)
def test_every_time_form_is_taken_by_every_command_with_a_window(
    db: Path, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["explain", "--db", str(db)],
        ["query", "--db", str(db), "SELECT count(*) FROM events"],
        ["export", "--db", str(db), "-o", str(tmp_path / "t.json")],
        ["diff", str(db), str(db), "--no-findings"],
    ):
        assert main([*argv, f"--from={text}", "--to=end-0s"]) == 0, argv
    assert "not a time" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stacks", "--min-duration", "5 parsecs"], "--min-duration 5 parsecs: not a duration"),
        (["query", "--timeout", "soon", "SELECT 1"], "--timeout soon: not a duration"),
        (["explain", "--from", "yesterday"], "--from yesterday: not a time"),
        (["explain", "--since", "1m30"], "--since 1m30: not a duration"),
    ],
)
def test_an_unreadable_duration_or_time_is_one_line_naming_the_forms(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"error: {message}"
    assert "1m30s" in err  # the remedy shows the forms


def test_help_lists_the_forms_a_time_takes() -> None:
    help_text = " ".join(_subparser("explain").format_help().split())  # as read, whatever the wrapping
    assert "end-30s" in help_text and "ISO 8601" in help_text and "@1767323045" in help_text


def test_verbose_is_accepted_after_the_command_where_errors_ask_for_it(db: Path) -> None:
    args = build_parser("explain").parse_args(["explain", "--db", str(db), "-vv"])
    assert args.verbose == 2
    assert build_parser("explain").parse_args(["-v", "explain"]).verbose == 1
    assert build_parser("explain").parse_args(["explain"]).verbose == 0


def test_verbose_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 100)
    quiet, loud = _cli("explain", "--db", str(bad)), _cli("explain", "--db", str(bad), "-vv")
    assert quiet.returncode == loud.returncode != 0
    assert "Traceback" not in quiet.stderr


@pytest.mark.parametrize("command", ["trace", "explain", "query", "export", "merge", "demo"])
def test_abbreviated_options_are_refused_not_guessed(command: str) -> None:
    long_options = {
        opt
        for action in _subparser(command)._actions
        for opt in action.option_strings
        if opt.startswith("--") and len(opt) > 6
    }
    option = sorted(long_options)[0]
    with pytest.raises(SystemExit) as exit_:
        build_parser(command).parse_args([command, option[:-2]])
    assert exit_.value.code == 2


def test_trace_record_is_not_taken_for_record_all() -> None:
    p = _cli("trace", "--record", "--", "true")
    assert p.returncode == 2 and "unrecognized arguments: --record" in p.stderr


def test_ingero_spellings_that_clash_get_a_pointer(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-d", str(db)]) == 2
    assert f"use --db {db}" in capsys.readouterr().err
    assert main(["diff", str(db), str(db), "--nodes", "gpu-1:8080,gpu-2:8080"]) == 2
    err = capsys.readouterr().err
    assert "gpuscope merge" in err and "query, explain, stacks, export and nodes take --nodes" in err
    assert main(["trace", "-d", str(db), "--", "true"]) == 2
    assert f"--db {db}" in capsys.readouterr().err


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_hook_for_each_shell(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    hook = capsys.readouterr().out
    assert "gpuscope" in hook and "_ARGCOMPLETE" in hook


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("gpuscope ex", {"explain", "export"}),
        ("gpuscope trace --rec", {"--record-all"}),
        ("gpuscope explain --min", {"--min-severity"}),
        ("gpuscope completion f", {"fish"}),
    ],
)
def test_completion_answers_from_the_parser(tmp_path: Path, line: str, expected: set[str]) -> None:
    # what the hook does on <TAB>: call gpuscope with the line in the environment
    answer = tmp_path / "answer"
    env = dict(
        os.environ,
        _ARGCOMPLETE="1",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        _ARGCOMPLETE_STDOUT_FILENAME=str(answer),
        _ARGCOMPLETE_IFS="\n",
    )
    p = _cli(env=env)
    assert p.returncode == 0, p.stderr
    assert {w.strip() for w in answer.read_text().split("\n") if w.strip()} == expected


def test_every_guide_is_a_topic_and_prints_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    assert {t.name for t in topics()} == {p.stem for p in (REPO / "docs").glob("*.md")}
    assert main(["docs", "schema"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "schema.md").read_text()
    assert main(["docs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {"query", "schema", "explain", "trace"} <= {t["topic"] for t in listed}


def test_an_unknown_guide_names_the_ones_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "nonesuch"]) == 2
    err = capsys.readouterr().err
    assert "no guide named 'nonesuch'" in err and "schema" in err


def test_help_and_errors_point_at_gpuscope_docs_not_at_paths_a_wheel_lacks() -> None:
    for name in COMMANDS:
        parser = _subparser(name)
        assert "docs/" not in parser.format_help(), name
    from gpuscope.query.guard import QuerySyntaxError

    assert "docs/" not in str(getattr(QuerySyntaxError, "remedy", ""))


def test_the_checkout_finds_its_own_docs_folder() -> None:
    assert docs_dir() in (REPO / "docs", REPO / "src" / "gpuscope" / "_docs")


def test_printed_next_steps_name_a_gpuscope_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # without a gpuscope on PATH: the full path of this installation's launcher (or python -m)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    program = invocation()
    assert program != "gpuscope"
    run = subprocess.run([*program.split(" "), "version"], capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.startswith("gpuscope ")
    # with `make install`'s launcher on PATH: plain `gpuscope`
    bindir = tmp_path / "bin"
    bindir.mkdir()
    launcher = bindir / "gpuscope"
    launcher.write_text(f'#!/bin/sh\nexec "{Path(sys.executable).with_name("gpuscope")}" "$@"\n')
    launcher.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    assert invocation() == "gpuscope"
    # and another program called gpuscope is not taken for this one
    launcher.write_text('#!/bin/sh\nexec /opt/other/gpuscope "$@"\n')
    assert invocation() != "gpuscope"


def test_demo_json_is_one_object_on_stdout_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    p = _cli("demo", "--synthetic", "incident", "--scale", "0.3", "--db", str(tmp_path / "d.db"), "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert list(scratch.iterdir()) == []
    doc = json.loads(p.stdout)
    (scenario,) = doc["scenarios"]
    assert (doc["mode"], scenario["name"], scenario["as_expected"]) == ("synthetic", "incident", True)
    assert scenario["top_finding"] == scenario["expected"] == "cpu-preemption"
    assert "Next:" in p.stderr


def test_trace_without_privileges_fails_before_creating_a_recording(tmp_path: Path) -> None:
    home = tmp_path / "home"
    p = as_nobody([sys.executable, "-m", "gpuscope", "trace", "--", "true"], home)
    assert p.returncode == 3, p.stderr
    assert "sudo gpuscope trace" in p.stderr and "Traceback" not in p.stderr
    assert not (home / ".gpuscope").exists()


@pytest.mark.parametrize("name", [c for c in COMMANDS if c != "completion"])  # completion prints a shell script
def test_every_command_has_json(name: str) -> None:
    parser = _subparser(name)
    assert any("--json" in a.option_strings for a in parser._actions)
