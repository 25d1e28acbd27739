"""A server opens its recording per request: an unchanged file is not re-checked, a changed one is."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuscope.errors import DatabaseError
from gpuscope.recording.open import open_recording
from gpuscope.store import connect, integrity
from tests.unit.analysis.builder import Events, steady_training


def _recording(path: Path) -> Path:
    ev = Events()
    steady_training(ev, 2000)
    return ev.to_db(path)


def test_an_unchanged_file_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _recording(tmp_path / "run.db")
    checks: list[bool] = []
    real = integrity.first_problem  # the function connect imported and calls by its own name

    def counted(*a: Any, **k: Any) -> str | None:
        checks.append(True)
        return real(*a, **k)

    monkeypatch.setattr(connect, "first_problem", counted)
    for _ in range(3):
        open_recording(db).close()
    assert len(checks) == 1


def test_damage_after_a_check_is_still_found(tmp_path: Path) -> None:
    db = _recording(tmp_path / "run.db")
    open_recording(db).close()
    size = db.stat().st_size
    with open(db, "r+b") as f:  # a page in the middle overwritten: the file's time changes, its size does not
        f.seek(size // 2)
        f.write(os.urandom(4096))
    assert db.stat().st_size == size
    with pytest.raises(DatabaseError, match=r"damaged|malformed|not a database"):
        open_recording(db).close()
