"""Bad numbers and paths on the command line: refused up front with exit 2 and the valid range, never deep inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_gpuscope
from tests.unit.query.builder import build_db

BAD = [
    (["explain", "--pid", "99999999999999999999"], "out of range (a process id from 1 to 4,194,304)"),
    (["query", "--pid", "0", "SELECT 1"], "out of range (a process id"),
    (["stacks", "--pid", "-3"], "out of range (a process id"),
    (["stacks", "--limit", "0"], "out of range (a stack count from 1 to 10,000)"),
    (["export", "--counter-interval", "0", "-o", "{tmp}/out.json"], "--counter-interval 0: must be more than 0"),
    (["export", "--max-events", "99999999999999999999", "-o", "{tmp}/out.json"], "out of range (an event count"),
    (["diff", "{db}", "{db}", "--alpha", "-1"], "out of range (a significance level in (0, 1))"),
    (["diff", "{db}", "{db}", "--alpha", "nan"], "out of range (a significance level"),
    (["diff", "{db}", "{db}", "--alpha", "7"], "out of range (a significance level"),
    (["diff", "{db}", "{db}", "--min-ratio", "inf"], "out of range (a p50 ratio"),
    (["query", "--db", "", "SELECT 1"], "--db '': an empty path"),
    (["trace", "-d", "", "--", "true"], "--duration : not a duration"),
    (["trace", "-d", "0", "--", "true"], "--duration 0: must be more than 0"),
    (["trace", "--duration", "0ms", "--", "true"], "--duration 0ms: must be more than 0"),
    (["trace", "-d=-5s", "--", "true"], "--duration -5s: not a duration"),
    (["query", ""], "error: no SQL statement: the SQL is empty"),
    (["query", " \n\t "], "error: no SQL statement: the SQL is empty"),
    (["query", "; -- nothing /* here */"], "error: no SQL statement in '; -- nothing /* here */'"),
    (["trace", "--ring-size", "16g", "--", "true"], "must be a power of two from 4k to 1g"),
    (["trace", "--stack-every", "cudaMalloc=99999999999999999999", "--", "true"], "N above 1,000,000,000"),
    (["trace", "-p", "99999999999999999999"], "out of range (a process id"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_a_usage_error_naming_the_valid_range(tmp_path: Path, argv: list[str], message: str) -> None:
    # given a recording that the bad value must leave untouched
    db = build_db(tmp_path / "run.db", n=20)
    before = db.read_bytes()
    args = [a.format(db=db, tmp=tmp_path) for a in argv]
    if args[0] == "trace":
        args[1:1] = ["--db", str(tmp_path / "new.db")]  # and no recording may be left behind
    elif "--db" not in args and args[0] != "diff":
        args += ["--db", str(db)]
    # when
    p = run_gpuscope(*args, timeout=60)
    # then
    assert p.returncode == 2, p.stderr
    assert message in p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""
    assert db.read_bytes() == before
    assert not (tmp_path / "out.json").exists()
    assert not list(tmp_path.glob("new.db*"))
