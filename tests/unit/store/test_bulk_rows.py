"""gs_int64_rows: the writer's rows handed to SQLite as one blob, read back exactly, and refused when malformed."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuscope.store.bulk_rows import EXTENSION, MAX_COLUMNS, insert_from_blob, load_bulk_rows


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    c = sqlite3.connect(":memory:")
    if not load_bulk_rows(c):
        # Only a Python built without loadable SQLite extensions (pyenv's default) cannot: CI's Debian Python can,
        # and there the fast path must be what is tested.
        assert os.environ.get("CI") != "true", f"gs_int64_rows did not load from {EXTENSION}"
        pytest.skip("this Python's sqlite3 cannot load extensions")
    yield c
    c.close()


def test_rows_come_back_exactly_in_order_whatever_their_values(conn: sqlite3.Connection) -> None:
    # given rows of three int64 columns, the extremes included
    rows = np.array([[0, -1, 2**63 - 1], [-(2**63), 42, 7], [1, 2, 3]], dtype=np.int64)
    # when read through the table-valued function
    got = conn.execute("SELECT c0, c1, c2 FROM gs_int64_rows(?, 3)", (rows.tobytes(),)).fetchall()
    # then
    assert got == [tuple(r) for r in rows.tolist()]


def test_an_insert_from_a_blob_stores_the_same_rows_as_binding_each_value(conn: sqlite3.Connection) -> None:
    cols = ("a", "b", "c", "d")
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, a, b, c, d)")
    rows = np.random.default_rng(3).integers(-(2**62), 2**62, (1000, 4), dtype=np.int64)
    conn.execute(insert_from_blob("t", cols), (rows.tobytes(),))
    assert conn.execute("SELECT a, b, c, d FROM t ORDER BY id").fetchall() == [tuple(r) for r in rows.tolist()]
    assert conn.execute("SELECT min(id), max(id) FROM t").fetchone() == (1, 1000)


def test_columns_past_the_rows_width_are_null_and_no_blob_is_no_rows(conn: sqlite3.Connection) -> None:
    one = np.array([[5]], dtype=np.int64).tobytes()
    assert conn.execute("SELECT c0, c1, c31 FROM gs_int64_rows(?, 1)", (one,)).fetchall() == [(5, None, None)]
    assert conn.execute("SELECT count(*) FROM gs_int64_rows(NULL, 3)").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM gs_int64_rows(x'', 3)").fetchone() == (0,)


@pytest.mark.parametrize(
    ("sql", "args"),
    [
        ("SELECT * FROM gs_int64_rows(?, 3)", (b"\0" * 20,)),  # not whole rows
        ("SELECT * FROM gs_int64_rows(?, 0)", (b"\0" * 8,)),
        (f"SELECT * FROM gs_int64_rows(?, {MAX_COLUMNS + 1})", (b"\0" * 8 * (MAX_COLUMNS + 1),)),
        ("SELECT * FROM gs_int64_rows(?, 1)", ("text, not a blob",)),
        ("SELECT * FROM gs_int64_rows(?, '1')", (b"\0" * 8,)),
    ],
)
def test_a_malformed_call_is_an_error_not_a_partial_read(conn: sqlite3.Connection, sql: str, args: tuple) -> None:
    with pytest.raises(sqlite3.OperationalError, match="gs_int64_rows: a blob of whole rows"):
        conn.execute(sql, args).fetchall()


def test_both_arguments_are_required(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.OperationalError, match="takes two arguments"):
        conn.execute("SELECT * FROM gs_int64_rows").fetchall()


def test_without_the_file_the_writer_is_told_to_bind_values(tmp_path: Path) -> None:
    c = sqlite3.connect(":memory:")
    assert load_bulk_rows(c, tmp_path / "missing.so") is False
    # and the function is not there
    with pytest.raises(sqlite3.OperationalError):
        c.execute("SELECT * FROM gs_int64_rows(NULL, 1)")


def test_the_statement_names_every_column_once() -> None:
    assert insert_from_blob("t", ("a", "b")) == "INSERT INTO t(a, b) SELECT c0, c1 FROM gs_int64_rows(?, 2)"
    with pytest.raises(ValueError):
        insert_from_blob("t", ())
