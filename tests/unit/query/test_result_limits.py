"""User SQL cannot take the memory it likes: values, results and SQLite's heap are bounded; every format streams.

The time limit covers SQLite's virtual machine, not one call of a function:
``randomblob(1000000000)`` is one step. These run the issue's statements
through the real CLI and measure its own peak RSS (``wait4`` in a small launcher).
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gpuscope.query.guarded as engine
from gpuscope.query import QueryTooLargeError, ResultLimits, open_reader
from gpuscope.query.guard import SQLITE_HEAP_BYTES
from gpuscope.query.output import TABLE_HEAD_CHARS, TABLE_HEAD_ROWS, write_table
from tests.unit.query.builder import build_db

MB = 1_000_000
# Generous bounds: the child's peak RSS stays far below them; what they catch is the gigabytes of before.
RSS_BOUND = 500 * MB
TIME_BOUND_S = 120.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db", n=2000)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int
    seconds: float


# Runs the command as its child and writes the child's own peak RSS (KiB). Linux counts a process's peak
# across exec, from the memory it was forked with: a child of this test process would report at least the
# test process's own peak (hundreds of MB late in a session). A child of this small launcher starts small.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(tmp_path: Path, *args: str) -> Run:
    """`gpuscope query ARGS` in a grandchild; its exit code, output, peak RSS (bytes) and wall time."""
    out, err, rss = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "maxrss"
    started = time.monotonic()
    with out.open("w") as o, err.open("w") as e:
        argv = [sys.executable, "-c", _LAUNCHER, str(rss), sys.executable, "-m", "gpuscope", "query", *args]
        proc = subprocess.run(argv, stdout=o, stderr=e, timeout=TIME_BOUND_S * 2)
    return Run(
        proc.returncode, out.read_text(), err.read_text(), int(rss.read_text()) * 1024, time.monotonic() - started
    )


def assert_too_large(run: Run) -> None:
    assert run.returncode == 1, run.stderr
    lines = [line for line in run.stderr.splitlines() if not line.startswith("note:")]
    assert lines[0].startswith("error: result too large: "), run.stderr
    assert lines[1].startswith("  fix: add a LIMIT, select fewer columns"), run.stderr
    assert "Traceback" not in run.stderr


def test_randomblob_of_a_gigabyte_is_refused_at_once_in_bounded_memory(db: Path, tmp_path: Path) -> None:
    run = run_measured(tmp_path, "--db", str(db), "SELECT randomblob(1000000000)")
    assert_too_large(run)
    assert run.peak_rss < RSS_BOUND and run.seconds < TIME_BOUND_S
    assert run.stdout == ""


def test_printf_of_two_billion_characters_stays_in_bounded_memory(db: Path, tmp_path: Path) -> None:
    run = run_measured(tmp_path, "--db", str(db), "--csv", "SELECT printf('%.*c', 2000000000, 'x') AS v")
    # SQLite cuts the value to NULL at its length limit (some releases first repeat the character
    # two billion times in one step, beyond the time limit's reach) or refuses it as too big.
    if run.returncode == 0:
        assert run.stdout == 'v\n""\n', run.stdout[:200]
    else:
        assert_too_large(run)
    assert run.peak_rss < RSS_BOUND and run.seconds < TIME_BOUND_S


@pytest.mark.parametrize("fmt", ["--table", "--csv", "--json", "--nl"])
def test_a_cross_join_streams_until_the_time_limit_in_bounded_memory(db: Path, tmp_path: Path, fmt: str) -> None:
    run = run_measured(tmp_path, "--db", str(db), fmt, "--timeout", "3s", "SELECT * FROM events a, events b")
    assert run.returncode == 1 and "interrupted after the 3.00 s time limit" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    # rows went out as they came, the table's too once its widths were read from its first rows
    assert run.stdout.count("\n") > TABLE_HEAD_ROWS * 2
    assert run.peak_rss < RSS_BOUND and run.seconds < TIME_BOUND_S


def test_a_row_of_many_long_values_is_stopped_by_the_sqlite_heap_cap(db: Path, tmp_path: Path) -> None:
    # 100 values of 4 MB, each under the 4 MiB value limit: 400 MB in one row
    sql = "SELECT " + ", ".join(["zeroblob(4000000)"] * 100)
    run = run_measured(tmp_path, "--db", str(db), "--csv", sql)
    assert_too_large(run)
    assert f"{SQLITE_HEAP_BYTES >> 20} MiB in this process" in run.stderr
    assert run.peak_rss < RSS_BOUND and run.seconds < TIME_BOUND_S


def test_a_function_of_many_megabytes_a_row_is_refused_at_once_not_run_past_the_time_limit(
    db: Path, tmp_path: Path
) -> None:
    # given the statement that ran 37.6 s past a 5 s limit: 60 MB made per row, one VM step each
    sql = "SELECT count(*) FROM event_log WHERE length(randomblob(60000000))>0"
    run = run_measured(tmp_path, "--db", str(db), "--timeout", "1s", sql)
    # then SQLite refuses to make the value at all (the limit is the API's: 4 MiB)
    assert_too_large(run)
    assert "a value longer than 4 MiB" in run.stderr
    assert run.peak_rss < RSS_BOUND and run.seconds < TIME_BOUND_S


def test_the_time_limit_holds_when_every_row_costs_milliseconds(db: Path, tmp_path: Path) -> None:
    # given rows that each make a value just under the limit (~3 ms a row, all inside single VM steps)
    sql = "SELECT count(*) FROM event_log WHERE length(randomblob(4000000))>0"
    run = run_measured(tmp_path, "--db", str(db), "--timeout", "1s", sql)
    # then the deadline stops it: the clock is read every PROGRESS_STEPS steps, a fraction of a second of them
    assert run.returncode == 1 and "interrupted after the 1.00 s time limit" in run.stderr, run.stderr
    assert run.seconds < 10, run.seconds  # 38 s past the limit before; about 0.2 s now


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT randomblob(2000)",
        "SELECT zeroblob(2000)",
        "SELECT length(randomblob(2000))",  # made and dropped inside SQLite: still refused
        "SELECT replace(hex(zeroblob(600)), '0', 'ab')",
        "SELECT group_concat(printf('%.100c', 'x'), '') FROM events",
    ],
)
def test_a_value_over_the_readers_limit_is_refused_naming_the_limit(db: Path, sql: str) -> None:
    with open_reader(db, limits=ResultLimits(value_bytes=1000)) as reader, pytest.raises(QueryTooLargeError) as exc:
        result = reader.query(sql)
        list(result.rows)
    assert str(exc.value).startswith("result too large: a value longer than 1000 bytes")


def test_the_rows_over_the_result_limit_are_refused_once_they_pass_it(db: Path) -> None:
    limits = ResultLimits(result_bytes=100_000)
    with open_reader(db, limits=limits) as reader:
        result = reader.query("SELECT printf('%.100c', 'x') FROM events")
        fetched = 0
        with pytest.raises(QueryTooLargeError, match=r"result too large: more than 100000 bytes of rows"):
            for _ in result.rows:
                fetched += 1
        assert 900 <= fetched <= 1000  # stopped where the rows passed the limit, not at the end
        # a result under the limit is whole
        assert len(list(reader.query("SELECT id FROM events LIMIT 500").rows)) == 500


def test_without_setlimit_each_fetched_value_is_checked(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Python 3.10's sqlite3 has no setlimit: the engine then checks each value as it is fetched.
    monkeypatch.setattr(engine, "_CAN_SET_LIMITS", False)
    with open_reader(db, limits=ResultLimits(value_bytes=1000)) as reader:
        assert list(reader.query("SELECT length(randomblob(2000))").rows) == [(2000,)]  # SQLite was not limited
        with pytest.raises(QueryTooLargeError, match="a value longer than 1000 bytes"):
            list(reader.query("SELECT 1, randomblob(2000)").rows)


def test_a_statement_that_is_not_unicode_text_is_a_syntax_error(db: Path) -> None:
    from gpuscope.query import QuerySyntaxError

    with open_reader(db) as reader, pytest.raises(QuerySyntaxError, match="not valid Unicode text"):
        reader.query("SELECT '\ud800'")


class _Recorder(io.StringIO):
    """An output that notes, at each write, how many rows the table had taken from its source."""

    def __init__(self, pulled: list[int]) -> None:
        super().__init__()
        self.pulled = pulled
        self.at_write: list[int] = []

    def write(self, s: str) -> int:
        self.at_write.append(self.pulled[0])
        return super().write(s)


def _counted(rows: list[list[Any]], pulled: list[int]) -> Iterator[list[Any]]:
    for row in rows:
        pulled[0] += 1
        yield row


def test_the_table_aligns_on_its_first_rows_and_streams_the_rest() -> None:
    # given more rows than the table reads for its widths, the last ones wider than any before
    rows: list[list[Any]] = [[i, "x" * (i % 7)] for i in range(5 * TABLE_HEAD_ROWS)]
    rows[-1] = [1, "a much wider cell than the first rows had"]
    pulled = [0]
    out = _Recorder(pulled)
    # when it is written
    n = write_table(["n", "text"], _counted(rows, pulled), out)
    # then the header came after the first rows only, and every later row went out as it was taken
    assert n == len(rows)
    assert out.at_write[0] == TABLE_HEAD_ROWS
    # (header, rule, the first rows; then row k written right after it was taken)
    assert out.at_write[2 + TABLE_HEAD_ROWS :] == list(range(TABLE_HEAD_ROWS + 1, len(rows) + 1))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[2] == "  0"  # right-aligned in the width of the first rows' numbers (999)
    assert lines[-1].endswith("a much wider cell than the first rows had")  # widens its own line only


def test_the_tables_first_rows_are_bounded_by_their_size_too() -> None:
    pulled = [0]
    out = _Recorder(pulled)
    wide = [["y" * 100_000] for _ in range(50)]
    write_table(["v"], _counted(wide, pulled), out)
    assert out.at_write[0] == -(-TABLE_HEAD_CHARS // 100_000)  # the rows that reach the size, not 1000
