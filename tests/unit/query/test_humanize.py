"""Readable table cells: what a column holds is read from its name; only the table changes."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest

from gpuscope.model.times import iso_utc
from gpuscope.model.units import fmt_ns
from gpuscope.query.humanize import ColumnKind, ReadableCells, column_kind, duration_text, readable_cells
from gpuscope.query.output import OutputFormat, write_rows

WALL = 1_767_337_132_123_456_789  # 2026-01-02T06:58:52.123456789Z
OFFSET = WALL - 5_000_000_000  # a session whose monotonic clock read 5 s at that instant


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("wall_ns", ColumnKind.WALL),
        ("started_wall_ns", ColumnKind.WALL),
        ("created_at_ns", ColumnKind.WALL),
        ("first_seen_ns", ColumnKind.WALL),
        ("ts_ns", ColumnKind.MONOTONIC),
        ("bucket_ns", ColumnKind.MONOTONIC),
        ("stopped_mono_ns", ColumnKind.MONOTONIC),
        ("window_end_ns", ColumnKind.MONOTONIC),
        ("duration_ns", ColumnKind.DURATION),
        ("off_cpu_ns", ColumnKind.DURATION),
        ("max_duration_ns", ColumnKind.DURATION),
        ("gap_ns", ColumnKind.DURATION),
        ("clock_offset_ns", ColumnKind.DURATION),
        ("max(ts_ns)", ColumnKind.MONOTONIC),
        ("MIN(e.wall_ns)", ColumnKind.WALL),
        ("avg(duration_ns)", ColumnKind.DURATION),
        ("sum(duration_ns)", ColumnKind.DURATION),
        ("sum(ts_ns)", ColumnKind.NUMBER),
        ("count(*)", ColumnKind.NUMBER),
        ("bytes", ColumnKind.NUMBER),
        ("id", ColumnKind.IDENTIFIER),
        ("pid", ColumnKind.IDENTIFIER),
        ("session_id", ColumnKind.IDENTIFIER),
        ("stack_hash", ColumnKind.IDENTIFIER),
        ("handle", ColumnKind.IDENTIFIER),
        ("arg0", ColumnKind.IDENTIFIER),
        ("ret", ColumnKind.IDENTIFIER),
    ],
)
def test_a_columns_meaning_is_read_from_its_name(name: str, kind: ColumnKind) -> None:
    assert column_kind(name) is kind


def test_a_unix_time_is_iso_8601_utc_to_the_microsecond() -> None:
    assert iso_utc(WALL, 6) == "2026-01-02T06:58:52.123456Z"


def test_a_duration_gets_its_unit_and_keeps_its_sign() -> None:
    # the units are fmt_ns's, as everywhere else: 1.2 ms, 500 ns
    assert duration_text(1_200_000) == fmt_ns(1_200_000) != "1200000"
    assert duration_text(-3_200_000) == "-" + fmt_ns(3_200_000)


def test_each_kind_of_cell_is_shown_for_people() -> None:
    # given a result with a time of each clock, a duration, a count and an id
    cells = ReadableCells(["wall_ns", "ts_ns", "duration_ns", "n", "pid", "op", "avg(duration_ns)"], {1: OFFSET})
    # when a row is made readable
    row = cells((WALL, 5_000_000_000, 1_234_567, 1_234_567, 4821, "cudaMalloc", 1500.0))
    # then times are ISO 8601, durations have units, counts are grouped and ids stay as they are
    assert row == [
        "2026-01-02T06:58:52.123456Z",
        "2026-01-02T06:58:52.123456Z",
        fmt_ns(1_234_567),
        "1,234,567",
        "4821",
        "cudaMalloc",
        fmt_ns(1500.0),
    ]
    assert cells.note() is None


def test_null_and_text_values_in_a_time_column_are_left_as_they_are() -> None:
    cells = ReadableCells(["ts_ns", "duration_ns"], {1: OFFSET})
    assert cells((None, "n/a")) == ["", "n/a"]


def test_monotonic_times_of_several_sessions_use_each_rows_session() -> None:
    # given two sessions whose monotonic clocks are an hour apart
    offsets = {1: OFFSET, 2: OFFSET - 3_600_000_000_000}
    cells = ReadableCells(["session_id", "ts_ns"], offsets)
    # then the same instant reads the same in both
    assert cells((1, 5_000_000_000))[1] == cells((2, 3_605_000_000_000))[1] == "2026-01-02T06:58:52.123456Z"


def test_monotonic_times_of_several_sessions_without_session_id_stay_numbers_with_a_note() -> None:
    cells = ReadableCells(["ts_ns"], {1: OFFSET, 2: OFFSET - 1})
    assert cells((5_000_000_000,)) == ["5,000,000,000"]
    note = cells.note()
    assert note is not None and "ts_ns" in note and "session_id" in note


def test_a_value_that_is_no_plausible_time_is_shown_as_a_number() -> None:
    # a difference of two times, named like a time
    cells = ReadableCells(["wall_ns"], {})
    assert cells((12_345_678,)) == ["12,345,678"]


def test_only_the_table_is_readable_json_keeps_the_stored_values() -> None:
    columns = ["ts_ns", "duration_ns", "n"]
    rows = [(5_000_000_000, 1_234_567, 1000)]
    table, as_json = io.StringIO(), io.StringIO()
    write_rows(columns, rows, OutputFormat.TABLE, table, table_cells=ReadableCells(columns, {1: OFFSET}))
    write_rows(columns, rows, OutputFormat.JSON, as_json, table_cells=ReadableCells(columns, {1: OFFSET}))
    lines = table.getvalue().splitlines()
    assert lines[2].split() == ["2026-01-02T06:58:52.123456Z", *fmt_ns(1_234_567).split(), "1,000"]
    assert json.loads(as_json.getvalue()) == [{"ts_ns": 5_000_000_000, "duration_ns": 1_234_567, "n": 1000}]


def test_readable_numbers_stay_right_aligned_and_times_left_aligned() -> None:
    columns = ["ts_ns", "duration_ns"]
    rows = [(5_000_000_000, 500), (5_000_000_001, 1_234_567_890)]
    out = io.StringIO()
    write_rows(columns, rows, OutputFormat.TABLE, out, table_cells=ReadableCells(columns, {1: OFFSET}))
    first, second = out.getvalue().splitlines()[2:]
    assert first.endswith(f" {fmt_ns(500)}") and second.endswith(fmt_ns(1_234_567_890))
    assert first.startswith("2026-") and second.startswith("2026-")


def test_a_file_without_sessions_still_gets_a_readable_table_with_times_as_numbers() -> None:
    conn = sqlite3.connect(":memory:")
    cells = readable_cells(conn, ["ts_ns", "duration_ns"])
    assert cells((5_000_000_000, 2_000)) == ["5,000,000,000", fmt_ns(2_000)]
    conn.close()
