"""Column blocks: a columnar copy of ``event_log`` that ``explain`` reads instead of the rows.

Fetching rows through ``sqlite3`` costs about 2.5 us each (values become
Python objects); a block hands back every column of up to ``BLOCK_ROWS`` rows
as one blob, decoded by numpy. A block holds the rows with ids
``first_id .. first_id + rows - 1`` (ids are contiguous: one writer appends
them), each column stored as its offset from the block's minimum in the
fewest bytes that hold it (0 when the column is constant).

Who keeps them true:

- ``trace``'s writer (``gpuscope.store.writer``) encodes the rows it inserts
  and writes a block per ``BLOCK_ROWS`` rows or ``BLOCK_MAX_AGE_S``, in the
  transaction of its newest rows; rows not yet in a block are read as rows.
- Retention deletes the oldest rows and trims the block it cuts through
  (``trim_block_before``).
- Triggers (schema 10) drop the block of any row deleted or updated by other
  means (a file edited by hand), so its rows are read as rows again.
- ``import`` and ``merge`` build blocks for the rows they write (``build_blocks``):
  merge copies none, as op and row ids may be renumbered in its output.

The triggers cost retention about 0.6 us a deleted row (300k rows: 0.30 s
against 0.11 s without them), measured on a 2-CPU VM.

``gpuscope.store.blocks_read`` finds the runs of blocks with contiguous ids;
rows outside them are read through SQL, so a file is always read whole.
"""

from __future__ import annotations

import sqlite3
import struct
from typing import Any

import numpy as np

# Rows per block, and the oldest a block's first row may be before it is written.
BLOCK_ROWS = 65_536
BLOCK_MAX_AGE_S = 5.0
# Block columns, in blob order: the event_log columns the analysis frame reads.
BLOCK_COLUMNS = (
    "ts_ns",
    "duration_ns",
    "pid",
    "tid",
    "op_id",
    "cgroup_id",
    "bytes",
    "handle",
    "stream",
    "arg0",
    "arg1",
)
_VERSION = 1
_HEAD = struct.Struct("<BI")  # format version, rows
_COLUMN_HEAD = struct.Struct("<Bq")  # bytes per value (0: constant), minimum
_DTYPES: dict[int, np.dtype[Any]] = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


class BlockError(ValueError):
    """A block blob gpuscope did not write (damaged or edited): its rows are read as rows instead."""


def encode_block(columns: np.ndarray) -> bytes:
    """Encode an (n, len(BLOCK_COLUMNS)) int64 array, rows in id order."""
    n, width = columns.shape
    if width != len(BLOCK_COLUMNS):
        raise ValueError(f"a block has {len(BLOCK_COLUMNS)} columns, not {width}")
    parts = [_HEAD.pack(_VERSION, n)]
    for j in range(width):
        col = columns[:, j]
        base = int(col.min())
        # Offsets in uint64 arithmetic: exact for any two int64 values (pointers above 2**63 are stored negative).
        offset = col.view(np.uint64) - np.uint64(base & 0xFFFFFFFFFFFFFFFF)
        top = int(offset.max())
        size = 0 if top == 0 else next(s for s in (1, 2, 4, 8) if top < 1 << (8 * s))
        parts.append(_COLUMN_HEAD.pack(size, base))
        if size:
            parts.append(offset.astype(_DTYPES[size]).tobytes())
    return b"".join(parts)


def parse_block(blob: object, rows: int) -> list[tuple[int, np.ndarray | None]]:
    """Each column of a block of ``rows`` rows as (minimum, offsets from it; None when constant), without copying.

    Raises BlockError for a blob that is not such a block.
    """
    if not isinstance(blob, bytes) or len(blob) < _HEAD.size:
        raise BlockError("not a column block")
    version, n = _HEAD.unpack_from(blob, 0)
    if version != _VERSION or n != rows:
        raise BlockError(f"column block of version {version} with {n} rows where {rows} are counted")
    pos = _HEAD.size
    out: list[tuple[int, np.ndarray | None]] = []
    for _ in BLOCK_COLUMNS:
        if pos + _COLUMN_HEAD.size > len(blob):
            raise BlockError("column block cut short")
        size, base = _COLUMN_HEAD.unpack_from(blob, pos)
        pos += _COLUMN_HEAD.size
        if size == 0:
            out.append((base, None))
            continue
        dtype = _DTYPES.get(size)
        if dtype is None or pos + size * n > len(blob):
            raise BlockError("column block cut short")
        out.append((base, np.frombuffer(blob, dtype=dtype, count=n, offset=pos)))
        pos += size * n
    if pos != len(blob):
        raise BlockError("column block longer than its columns")
    return out


def widen(base: int, offsets: np.ndarray | None, out: np.ndarray) -> None:
    """Write ``base + offsets`` (int64, wrapping as the encoder's subtraction did) into ``out``."""
    if offsets is None:
        out[:] = base
    else:
        np.add(offsets, np.uint64(base & 0xFFFFFFFFFFFFFFFF), out=out.view(np.uint64), casting="unsafe")


def decode_block(blob: object, rows: int) -> list[np.ndarray]:
    """Every column of a block, as int64 arrays. Raises BlockError for a blob that is not such a block."""
    out = []
    for base, offsets in parse_block(blob, rows):
        col = np.empty(rows, dtype=np.int64)
        widen(base, offsets, col)
        out.append(col)
    return out


def write_block(conn: sqlite3.Connection, session_id: int, first_id: int, columns: np.ndarray) -> None:
    """Store the block of rows ``first_id ..`` (their BLOCK_COLUMNS, in id order) in the transaction at hand."""
    ts, dur = columns[:, 0], columns[:, 1]
    conn.execute(
        "INSERT OR REPLACE INTO event_blocks(first_id, rows, session_id, min_ts_ns, max_ts_ns, max_end_ns, columns) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            first_id,
            len(columns),
            session_id,
            int(ts.min()),
            int(ts.max()),
            int((ts + dur).max()),
            encode_block(columns),
        ),
    )


def build_blocks(conn: sqlite3.Connection) -> int:
    """Write the blocks of the rows after the newest block (of every row when there is none); return rows covered.

    For files written row by row (merged, imported, benchmark data): reads
    each row once, in id order, a block per ``BLOCK_ROWS`` contiguous ids of
    one session. Runs in the caller's transaction. Rows with values gpuscope
    never writes (not integers) stop it: what follows them stays rows.
    """
    row = conn.execute("SELECT first_id, rows FROM event_blocks ORDER BY first_id DESC LIMIT 1").fetchone()
    after = -(2**63) if row is None else int(row[0]) + int(row[1]) - 1
    cur = conn.execute(
        f"SELECT id, session_id, {', '.join(BLOCK_COLUMNS)} FROM event_log WHERE id > ? ORDER BY id", (after,)
    )
    covered = 0
    while rows := cur.fetchmany(BLOCK_ROWS):
        try:
            arr = np.array(rows, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            break
        ids, sessions = arr[:, 0], arr[:, 1]
        cuts = np.flatnonzero((ids[1:] != ids[:-1] + 1) | (sessions[1:] != sessions[:-1])) + 1
        for part in np.split(np.arange(len(arr)), cuts):
            write_block(conn, int(sessions[part[0]]), int(ids[part[0]]), np.ascontiguousarray(arr[part, 2:]))
        covered += len(arr)
    return covered


def last_row_id(conn: sqlite3.Connection) -> int:
    """The id SQLite gave the row this connection inserted last."""
    return int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])


def trim_block_before(conn: sqlite3.Connection, cut_id: int) -> tuple[int, int, np.ndarray] | None:
    """The block holding row ``cut_id`` and rows after it, decoded: (session id, first id after cut_id, its columns).

    Read before the rows up to ``cut_id`` are deleted (their trigger drops the
    block); ``write_block`` puts the rest back. None when no block holds
    ``cut_id`` with rows after it.
    """
    row = conn.execute(
        "SELECT first_id, rows, session_id, columns FROM event_blocks WHERE first_id <= ? "
        "ORDER BY first_id DESC LIMIT 1",
        (cut_id,),
    ).fetchone()
    if row is None:
        return None
    first, rows, session_id, blob = row
    if first + rows - 1 <= cut_id:
        return None
    try:
        cols = decode_block(blob, rows)
    except BlockError:
        return None  # its trigger drops it; the rows are read as rows
    keep = cut_id + 1 - first
    return int(session_id), cut_id + 1, np.stack([c[keep:] for c in cols], axis=1)
