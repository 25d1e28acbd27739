"""Errors that reach the command line: one line, a fix where there is one, no traceback."""

from __future__ import annotations

import argparse
import sqlite3

import pytest

from gpuscope import cli
from gpuscope.commands import version


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
