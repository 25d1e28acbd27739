"""gpuscope query: read-only whatever the SQL tries, time-limited, filters as views, formats that parse back."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import time
from pathlib import Path

import pytest

from gpuscope.errors import UsageError
from gpuscope.query import (
    EventFilter,
    QueryRefusedError,
    QuerySyntaxError,
    QueryTimeoutError,
    TimePoint,
    open_reader,
)
from gpuscope.query.output import OutputFormat, write_rows
from tests.conftest import run_gpuscope
from tests.unit.query.builder import WALL0, build_db


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "run.db", pids=(42, 77))


WRITE_ATTEMPTS = [
    "DELETE FROM sessions",
    "WITH x AS (SELECT 1) DELETE FROM event_log",
    "INSERT INTO comms(comm) VALUES ('x')",
    "REPLACE INTO sources VALUES ('a', 'b')",
    "UPDATE sessions SET node = 'evil'",
    "DROP VIEW events",
    "DROP TABLE event_log",
    "CREATE TABLE t(a)",
    "CREATE TEMP TABLE t(a)",
    "CREATE TEMP VIEW v AS SELECT 1",
    "CREATE INDEX i ON event_log(pid)",
    "ALTER TABLE sessions ADD COLUMN x",
    "ATTACH DATABASE '{tmp}/other.db' AS other",
    "DETACH main",
    "PRAGMA writable_schema = 1",
    "PRAGMA query_only = 0",
    "PRAGMA user_version = 99",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA wal_checkpoint",
    "VACUUM",
    "VACUUM INTO '{tmp}/copy.db'",
    "REINDEX",
    "ANALYZE",
    "BEGIN IMMEDIATE",
    "SAVEPOINT s",
    "SELECT 1; DELETE FROM sessions",
    "SELECT 1; -- a comment\nDELETE FROM sessions",
    "SELECT 1; /* ; */ DELETE FROM sessions",
    "UPDATE sqlite_master SET sql = ''",
    "SELECT load_extension('/tmp/evil.so')",
]


@pytest.mark.parametrize("sql", WRITE_ATTEMPTS)
def test_every_write_attempt_is_refused_and_the_file_is_unchanged(db: Path, sql: str) -> None:
    before = db.read_bytes()
    with open_reader(db) as reader, pytest.raises(QueryRefusedError):
        list(reader.query(sql.format(tmp=db.parent)).rows)
    assert db.read_bytes() == before
    assert not (db.parent / "other.db").exists()
    assert not (db.parent / "copy.db").exists()


def test_a_refused_write_exits_non_zero_with_one_line_and_a_remedy(db: Path) -> None:
    p = run_gpuscope("query", "--db", str(db), "DELETE FROM sessions")
    assert p.returncode == 2
    assert p.stdout == ""
    first, fix = p.stderr.strip().splitlines()
    assert first.startswith("error: refused") and "DELETE" in first
    assert fix.strip().startswith("fix:")


@pytest.mark.parametrize("sql", ["SELECT hex(fts3_tokenizer('simple'))", "SELECT FTS3_TOKENIZER('porter') IS NULL"])
def test_a_function_that_reveals_the_processes_memory_is_refused_with_no_address_shown(db: Path, sql: str) -> None:
    # fts3_tokenizer(name) returns a tokenizer's address in the reading process: an address-layout leak
    p = run_gpuscope("query", "--db", str(db), "--json", sql)
    assert p.returncode == 2 and p.stdout == ""
    first, fix = p.stderr.strip().splitlines()
    assert first == "error: refused: fts3_tokenizer() reveals the reading process's memory, not the recording"
    assert fix.strip().startswith("fix:")
    # and other functions still answer
    with open_reader(db) as reader:
        assert list(reader.query("SELECT hex('a'), length(zeroblob(4)), sqlite_version() IS NOT NULL").rows) == [
            ("61", 4, 1)
        ]


def test_a_runaway_cartesian_join_is_interrupted_by_the_time_limit(db: Path) -> None:
    started = time.monotonic()
    p = run_gpuscope(
        "query", "--db", str(db), "--timeout", "300ms", "SELECT count(*) FROM event_log a, event_log b, event_log c"
    )
    assert p.returncode == 1
    assert "interrupted after the 300.0 ms time limit" in p.stderr
    assert "Traceback" not in p.stderr
    assert time.monotonic() - started < 60  # the join itself would take hours


def test_the_time_limit_also_covers_fetching_rows(db: Path) -> None:
    with open_reader(db, timeout_s=0.2) as reader:
        result = reader.query("SELECT a.id FROM event_log a, event_log b, event_log c")
        with pytest.raises(QueryTimeoutError):
            for _ in result.rows:
                pass


def test_read_only_pragmas_and_recursive_ctes_are_allowed(db: Path) -> None:
    with open_reader(db) as reader:
        cols = [r[1] for r in reader.query("PRAGMA table_info(events)").rows]
        assert "op" in cols and "duration_ns" in cols
        assert next(iter(reader.query("PRAGMA user_version").rows))[0] >= 1
        rows = reader.query(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) SELECT x FROM c"
        )
        assert [r[0] for r in rows.rows] == [1, 2, 3]


def test_table_valued_pragmas_and_a_comment_after_the_semicolon_are_read(db: Path) -> None:
    before = db.read_bytes()
    with open_reader(db) as reader:
        cols = [r[0] for r in reader.query("SELECT name FROM pragma_table_info('events')").rows]
        assert "op" in cols
        assert next(r[1] for r in reader.query("SELECT * FROM pragma_database_list").rows) == "main"
        assert list(reader.query("SELECT 1 ; -- why").rows) == [(1,)]
        assert list(reader.query("SELECT ';' ; /* unclosed").rows) == [(";",)]
    assert db.read_bytes() == before


def test_a_syntax_error_is_a_usage_error_naming_the_problem(db: Path) -> None:
    with open_reader(db) as reader, pytest.raises(QuerySyntaxError, match="no such table: nosuch"):
        reader.query("SELECT * FROM nosuch")


def test_since_counts_back_from_the_end_of_the_recording_not_from_now(db: Path) -> None:
    # calls every 1 ms from 0 to 999 ms, 500 ns long: the recording ends at 999.0005 ms,
    # so the last 100 ms start at 899.0005 ms and hold calls 900..999
    with open_reader(db, event_filter=EventFilter.from_options(since="100ms")) as reader:
        (n,) = next(reader.query("SELECT count(*) FROM events WHERE pid = 42 AND op = 'cudaMalloc'").rows)
    assert n == 100


def test_pid_and_window_filters_apply_to_every_event_view_and_main_stays_reachable(db: Path) -> None:
    f = EventFilter.from_options(start="100ms", end="199ms", pids=[77])
    with open_reader(db, event_filter=f) as reader:
        for view in ("events", "cuda_calls", "event_log"):
            rows = list(reader.query(f"SELECT count(*), min(pid), max(pid) FROM {view}").rows)
            assert rows == [(200, 77, 77)], view
        (total,) = next(reader.query("SELECT count(*) FROM main.events").rows)
    assert total == 4000


def test_a_node_filter_that_matches_nothing_gives_no_rows(db: Path) -> None:
    with open_reader(db, event_filter=EventFilter.from_options(nodes=["elsewhere"])) as reader:
        assert next(reader.query("SELECT count(*) FROM events").rows) == (0,)


def test_json_csv_and_nl_outputs_parse_back_to_the_same_rows(db: Path) -> None:
    sql = "SELECT op, pid, count(*) AS n, sum(duration_ns) / 1e3 AS us FROM events GROUP BY op, pid ORDER BY op, pid"
    # --raw: the table's cells as stored, so they parse back (the readable table is tested in tests/unit/commands)
    outputs = {
        fmt: run_gpuscope("query", "--db", str(db), f"--{fmt}", "--raw", sql) for fmt in ("json", "csv", "nl", "table")
    }
    assert all(p.returncode == 0 and p.stderr == "" for p in outputs.values())
    as_json = json.loads(outputs["json"].stdout)
    as_nl = [json.loads(line) for line in outputs["nl"].stdout.splitlines()]
    as_csv = list(csv.DictReader(io.StringIO(outputs["csv"].stdout)))
    assert as_json == as_nl
    assert len(as_json) == 4
    assert as_json[0] == {"op": "cudaMalloc", "pid": 42, "n": 1000, "us": 500.0}
    assert [{k: str(v) for k, v in r.items()} for r in as_json] == as_csv
    table = outputs["table"].stdout.splitlines()
    assert table[0].split() == ["op", "pid", "n", "us"]
    assert set(table[1]) == {"-", " "}
    parsed = [[_number_or_text(cell) for cell in line.split()] for line in table[2:]]
    assert parsed == [list(r.values()) for r in as_json]


def _number_or_text(cell: str) -> object:
    try:
        return float(cell)
    except ValueError:
        return cell


def test_json_output_of_no_rows_is_an_empty_array_and_duplicate_columns_keep_their_values() -> None:
    out = io.StringIO()
    write_rows(["a"], [], OutputFormat.JSON, out)
    assert json.loads(out.getvalue()) == []
    out = io.StringIO()
    write_rows(["a", "a"], [(1, b"\x01")], OutputFormat.JSON, out)
    assert json.loads(out.getvalue()) == [{"a": 1, "a_2": "01"}]


@pytest.mark.parametrize(
    ("text", "offset_ns"),
    [("90s", 90_000_000_000), ("2m", 120_000_000_000), ("1.5", 1_500_000_000), ("250ms", 250_000_000)],
)
def test_a_duration_is_an_offset_from_the_recording_start(text: str, offset_ns: int) -> None:
    assert TimePoint.parse(text) == TimePoint(offset_ns=offset_ns)


@pytest.mark.parametrize(
    "text", ["2023-11-14T22:13:20.000123Z", "2023-11-14T22:13:20.000123+00:00", "2023-11-15T00:13:20.000123+02:00"]
)
def test_an_iso_8601_time_is_an_exact_wall_clock_instant(text: str) -> None:
    assert TimePoint.parse(text) == TimePoint(wall_ns=WALL0 + 123_000)


def test_an_iso_8601_time_without_a_zone_is_local_time() -> None:
    local = dt.datetime.fromtimestamp(WALL0 // 1_000_000_000)
    assert TimePoint.parse(local.isoformat()) == TimePoint(wall_ns=WALL0)


@pytest.mark.parametrize("text", ["nan", "inf", "soon", "end-soon", "--5s"])
def test_infinite_or_unreadable_times_are_usage_errors_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match=f"--from {re.escape(text)}: not a time"):
        EventFilter.from_options(start=text)


def test_iso_8601_bounds_filter_query_rows_like_the_offsets_they_name(db: Path) -> None:
    by_offset = EventFilter.from_options(start="100ms", end="199ms")
    by_time = EventFilter.from_options(start="2023-11-14T22:13:20.100Z", end="2023-11-14T22:13:20.199Z")
    counts = []
    for f in (by_offset, by_time):
        with open_reader(db, event_filter=f) as reader:
            counts.append(next(reader.query("SELECT count(*) FROM events").rows))
    assert counts[0] == counts[1] == (400,)
