"""The config file: node and db, validated with one-line errors; where the recording path comes from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuscope.config import DEFAULT_DB, DbPath, load_config, resolve_db_path
from gpuscope.errors import UsageError
from gpuscope.store.connect import default_db_path
from tests.conftest import run_gpuscope


def test_node_and_db_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('node = "gpu-node-01"\ndb = "/data/run.db"\n')
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    assert load_config() == {"node": "gpu-node-01", "db": "/data/run.db"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node = \n", "malformed"),
        ('nodes = "x"\n', "unknown config keys: nodes"),
        ('node = "a:b"\n', "may not contain ':'"),
        ("node = 3\n", "must be a non-empty string"),
    ],
)
def test_malformed_config_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    with pytest.raises(UsageError, match=message):
        load_config()


def test_a_missing_explicit_config_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(UsageError, match="not found"):
        load_config()


@pytest.fixture
def no_config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPUSCOPE_DB, no GPUSCOPE_CONFIG, and the default config locations empty."""
    monkeypatch.delenv("GPUSCOPE_DB", raising=False)
    monkeypatch.delenv("GPUSCOPE_CONFIG", raising=False)
    monkeypatch.setattr("gpuscope.config.config_paths", lambda: [tmp_path / "absent.toml"])


def _config_with_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'db = "{db}"\n')
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    monkeypatch.setattr("gpuscope.config.config_paths", lambda: [cfg])
    return cfg


@pytest.mark.usefixtures("no_config_files")
def test_the_db_flag_wins_over_the_environment_and_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config_with_db(tmp_path, monkeypatch, "/from/config.db")
    monkeypatch.setenv("GPUSCOPE_DB", "/from/env.db")
    assert resolve_db_path("/from/flag.db") == DbPath(Path("/from/flag.db"), "--db")


@pytest.mark.usefixtures("no_config_files")
def test_the_environment_wins_over_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config_with_db(tmp_path, monkeypatch, "/from/config.db")
    monkeypatch.setenv("GPUSCOPE_DB", "/from/env.db")
    assert resolve_db_path(None) == DbPath(Path("/from/env.db"), "$GPUSCOPE_DB")


@pytest.mark.usefixtures("no_config_files")
def test_the_config_file_db_wins_over_the_built_in_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config_with_db(tmp_path, monkeypatch, "/from/config.db")
    assert resolve_db_path(None) == DbPath(Path("/from/config.db"), f"`db` in {cfg}")


@pytest.mark.usefixtures("no_config_files")
def test_without_flag_environment_or_config_the_built_in_default_is_used() -> None:
    assert resolve_db_path(None) == DbPath(Path(DEFAULT_DB).expanduser(), "the built-in default")


@pytest.mark.usefixtures("no_config_files")
def test_the_store_default_path_is_the_resolved_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config_with_db(tmp_path, monkeypatch, "/from/config.db")
    assert default_db_path() == Path("/from/config.db")


def test_a_db_flag_is_used_without_reading_a_broken_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(tmp_path / "missing.toml"))
    assert resolve_db_path("run.db").path == Path("run.db")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'node = "\xff\xfe"\n', "not UTF-8 text (byte 8)"),
        (b'node = "a\\u0000b"\n', "may not contain control characters"),
        (b'node = "a\\nb"\n', "may not contain control characters"),
        (b'node = "' + b"x" * 5000 + b'"\n', "a node name of 5,000 characters (at most 253)"),
        (b'node = "gpu:1"\n', "may not contain ':'"),
        (b'node = "  "\n', "must not be empty"),
    ],
    ids=["invalid-utf8", "nul", "newline", "5000-chars", "colon", "blank"],
)
def test_a_config_file_that_cannot_name_a_node_is_a_usage_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, message: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(content)
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(cfg))
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        load_config()
    assert str(cfg) in str(caught.value)


def test_node_names_given_on_the_command_line_are_checked_the_same_way(tmp_path: Path) -> None:
    for argv in (
        ["trace", "--node", "a\x01b", "--db", str(tmp_path / "t.db"), "--", "true"],
        ["trace", "--node", "", "--db", str(tmp_path / "t.db"), "--", "true"],
    ):
        p = run_gpuscope(*argv)
        assert p.returncode == 2 and "error: --node" in p.stderr, p.stderr
        assert not list(tmp_path.glob("t.db*"))
