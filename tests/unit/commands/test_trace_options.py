"""gpuscope trace: unreadable option values are usage errors that name the flag, before anything is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_gpuscope


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-d", "abc"], "--duration"),
        (["--duration", "inf"], "--duration"),
        (["--keep-first", "x"], "--keep-first"),
        (["--keep-first=-3s"], "--keep-first"),
        (["--ring-size", "abc"], "--ring-size"),
        (["--ring-size", "3000"], "--ring-size"),
        (["--max-db", "zz"], "--max-db"),
        (["--hang-threshold", "soon"], "--hang-threshold"),
    ],
)
def test_an_unreadable_value_is_a_usage_error_naming_its_flag(args: list[str], flag: str, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    res = run_gpuscope("trace", "--db", str(db), *args, "--", "true")
    assert res.returncode == 2, res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("error: ") and flag in first, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert not db.exists()
