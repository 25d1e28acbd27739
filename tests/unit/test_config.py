"""The config file: node and db, validated with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.config import load_config
from gpuscope.errors import UsageError


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
