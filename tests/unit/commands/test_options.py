"""The shared --db option: every reading command resolves the recording the same way and says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.cli import main
from tests.unit.query.builder import build_db


@pytest.fixture
def config_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recording of 200 calls named only by the config file's ``db`` key (no --db, no $GPUSCOPE_DB)."""
    db = build_db(tmp_path / "from-config.db", n=100)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'db = "{db}"\n')
    monkeypatch.delenv("GPUSCOPE_DB", raising=False)
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    return db


def test_explain_reads_the_recording_named_in_the_config_file(
    config_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["explain", "--json"])
    window = json.loads(capsys.readouterr().out)["window"]
    assert (rc, window["session_ids"], window["events"]) == (0, [1], 200)


def test_query_reads_the_recording_named_in_the_config_file(
    config_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["query", "--json", "SELECT count(*) AS n FROM events"])
    assert (rc, json.loads(capsys.readouterr().out)) == (0, [{"n": 200}])


def test_stacks_reads_the_recording_named_in_the_config_file(
    config_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording without stacks: a missing file would be an error, this one is an empty list
    rc = main(["stacks", "--json"])
    assert (rc, json.loads(capsys.readouterr().out)) == (0, [])


def test_the_db_flag_wins_over_the_config_file(
    config_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = build_db(tmp_path / "flag.db", n=10)
    rc = main(["query", "--db", str(other), "--json", "SELECT count(*) AS n FROM events"])
    assert (rc, json.loads(capsys.readouterr().out)) == (0, [{"n": 20}])


@pytest.mark.parametrize("command", ["trace", "explain", "stacks", "query", "export"])
def test_the_db_help_names_the_default_and_where_it_came_from(
    command: str, config_db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: the path is not wrapped
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert f"{config_db}, from `db` in {config_db.parent / 'config.toml'}" in capsys.readouterr().out


def test_a_broken_config_file_is_a_usage_error_when_the_command_runs_not_when_help_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("db = 3\n")
    monkeypatch.delenv("GPUSCOPE_DB", raising=False)
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    assert main(["explain"]) == 2
    assert "`db` must be a non-empty string" in capsys.readouterr().err
