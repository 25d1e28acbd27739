"""The config file: node and db, validated with one-line errors; where the recording path comes from."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.config import DEFAULT_DB, DbPath, load_config, resolve_db_path
from gpuscope.errors import UsageError
from gpuscope.store.connect import default_db_path
from tests.conftest import run_gpuscope
from tests.other_user import as_nobody, open_folder
from tests.unit.query.builder import build_db


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


NO_SUCH_USER = "~gpuscope-no-such-user-39"


def _nested_config(tmp_path: Path, depth: int = 10_000) -> Path:
    cfg = tmp_path / "deep.toml"
    cfg.write_text("db = " + "[" * depth + "]" * depth + "\n")
    return cfg


def test_a_config_of_arrays_nested_ten_thousand_deep_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(_nested_config(tmp_path)))
    with pytest.raises(UsageError, match="nested too deeply"):
        load_config()


def test_a_deeply_nested_config_stops_a_command_with_one_line_and_leaves_help_readable(tmp_path: Path) -> None:
    env = {**os.environ, "GPUSCOPE_CONFIG": str(_nested_config(tmp_path))}
    env.pop("GPUSCOPE_DB", None)
    for argv in (["explain"], ["query", "SELECT 1"], ["stacks"]):
        p = run_gpuscope(*argv, env=env, timeout=60)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert (
            p.stderr.splitlines()[0]
            == f"error: {tmp_path / 'deep.toml'}: malformed config: arrays or tables nested too deeply"
        )
    for argv in (["--help"], ["explain", "--help"], ["query", "-h"]):
        p = run_gpuscope(*argv, env=env, timeout=60)
        # help is built from the built-in defaults (the broken file is reported when a command runs)
        assert p.returncode == 0 and "Traceback" not in p.stderr and "usage: gpuscope" in p.stdout, p.stderr


@pytest.mark.parametrize("source", ["--db", "$GPUSCOPE_DB", "config"])
def test_a_home_of_a_user_that_does_not_exist_is_a_usage_error_naming_where_the_path_came_from(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"{NO_SUCH_USER}/x.db"
    monkeypatch.delenv("GPUSCOPE_DB", raising=False)
    monkeypatch.setenv("GPUSCOPE_CONFIG", str(tmp_path / "missing.toml"))
    if source == "$GPUSCOPE_DB":
        monkeypatch.setenv("GPUSCOPE_DB", path)
    if source == "config":
        cfg = _config_with_db(tmp_path, monkeypatch, path)
    with pytest.raises(UsageError) as caught:
        resolve_db_path(path if source == "--db" else None)
    where = f"{cfg}: db =" if source == "config" else source
    assert str(caught.value) == f"{where} {path}: {NO_SUCH_USER}: no such user"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["explain", "--db", f"{NO_SUCH_USER}/x.db"], "--db"),
        (["query", "--db", f"{NO_SUCH_USER}/x.db", "SELECT 1"], "--db"),
        (["export", "--db", "{db}", "-o", f"{NO_SUCH_USER}/t.json"], "-o"),
        (["merge", "{db}", "-o", f"{NO_SUCH_USER}/m.db"], "-o"),
        (["merge", f"{NO_SUCH_USER}/a.db", "-o", "{tmp}/m.db"], ""),
        (["import", f"{NO_SUCH_USER}/a.db", "-o", "{tmp}/m.db"], ""),
        (["diff", f"{NO_SUCH_USER}/a.db", "{db}"], ""),
        (["dashboard", "--db", "{db}", "--baseline", f"{NO_SUCH_USER}/b.db"], "--baseline"),
        (["trace", "--db", f"{NO_SUCH_USER}/x.db", "--", "true"], "--db"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_every_command_says_which_path_names_a_user_that_does_not_exist_in_one_line(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording the command must leave as it was, and nothing written
    db = build_db(tmp_path / "run.db", n=10)
    before = db.read_bytes()
    args = [a.format(db=db, tmp=tmp_path) for a in argv]
    # when
    status = main(args)
    # then
    err = capsys.readouterr().err
    bad = next(a for a in args if a.startswith(NO_SUCH_USER))
    assert status == 2, err
    assert err.splitlines()[0] == f"error: {named + ' ' if named else ''}{bad}: {NO_SUCH_USER}: no such user"
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("  fix: ")
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db"]


def test_the_environment_or_config_naming_a_user_that_does_not_exist_leaves_help_readable(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "GPUSCOPE_DB": f"{NO_SUCH_USER}/x.db"}
    p = run_gpuscope("explain", "--help", env=env, timeout=60)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    p = run_gpuscope("explain", env=env, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith(f"error: $GPUSCOPE_DB {NO_SUCH_USER}/x.db: "), p.stderr


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_an_explicit_config_that_is_not_a_regular_file_is_a_usage_error_saying_what_it_is(
    kind: str, tmp_path: Path
) -> None:
    # given GPUSCOPE_CONFIG naming a folder or a FIFO (which must not be opened: it would wait for a writer)
    cfg = tmp_path / "config.toml"
    cfg.mkdir() if kind == "folder" else os.mkfifo(cfg)
    env = {**os.environ, "GPUSCOPE_CONFIG": str(cfg)}
    env.pop("GPUSCOPE_DB", None)
    # when
    p = run_gpuscope("explain", env=env, timeout=60)
    # then
    what = "a folder, not a config file" if kind == "folder" else "a FIFO, not a regular file"
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines()[0].startswith(f"error: {cfg}: {what}"), p.stderr


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_default_config_location_holding_no_readable_file_is_passed_over_with_one_warning(
    kind: str, tmp_path: Path
) -> None:
    # given ~/.config/gpuscope/config.toml that is a folder or a FIFO, and no GPUSCOPE_CONFIG
    cfg = tmp_path / ".config" / "gpuscope" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.mkdir() if kind == "folder" else os.mkfifo(cfg)
    db = build_db(tmp_path / "run.db", n=10)
    env = {k: v for k, v in os.environ.items() if k not in {"GPUSCOPE_CONFIG", "GPUSCOPE_DB", "SUDO_USER", "SUDO_UID"}}
    env["HOME"] = str(tmp_path)
    # when
    p = run_gpuscope("query", "--db", str(db), "--json", "SELECT count(*) AS n FROM events", env=env, timeout=60)
    # then it still runs, and says once that the file was not read
    what = {
        "folder": "a folder, not a config file",
        "fifo": "a FIFO, not a regular file (a config file is read whole, as TOML)",
    }[kind]
    assert p.returncode == 0, p.stderr
    assert [line for line in p.stderr.splitlines() if line.startswith("warning: ")] == [
        f"warning: {cfg}: {what}; config file not read"
    ]


def test_a_default_config_file_the_user_may_not_read_is_passed_over_with_a_warning() -> None:
    # given, for the user nobody, a ~/.config/gpuscope/config.toml only root may read
    with open_folder("gpuscope-config-") as folder:
        home = folder / "home"
        cfg = home / ".config" / "gpuscope" / "config.toml"
        cfg.parent.mkdir(parents=True)
        cfg.write_text('node = "n"\n')
        cfg.chmod(0o600)
        for d in (home, home / ".config", cfg.parent):
            d.chmod(0o755)
        # when
        p = as_nobody([sys.executable, "-m", "gpuscope", "version"], home)
    # then
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [f"warning: {cfg}: cannot read config: Permission denied; config file not read"]
