"""The ``event_log`` rows the writer inserts: a batch of decoded events as one matrix of columns, and its statements.

``EventRows`` turns each batch into rows of ``event_log`` (process names as
``comms`` ids, unsigned values as their two's complement) and inserts them,
as one blob a statement where ``gs_int64_rows`` loads, else as values bound
from Python. ``PendingBlock`` holds the rows inserted but not yet in a column
block (``gpuscope.store.blocks``). ``gpuscope.store.writer`` runs both on its
thread, inside its transactions.
"""

from __future__ import annotations

import sqlite3
import time

import numpy as np

from gpuscope.store.blocks import BLOCK_COLUMNS
from gpuscope.store.bulk_rows import insert_from_blob, load_bulk_rows

_COLUMNS = (
    "session_id", "ts_ns", "duration_ns", "pid", "tid", "comm_id", "cgroup_id", "op_id", "flags", "ret",
    "bytes", "handle", "stream", "arg0", "arg1", "cgroup_v1_id", "stack_hash",
)  # fmt: skip
_INSERT_INTO = f"INSERT INTO event_log({', '.join(_COLUMNS)}) VALUES "
_NCOLS = len(_COLUMNS)
_ROW = "(" + ", ".join("?" * _NCOLS) + ")"
_INSERT = _INSERT_INTO + _ROW
# Rows per statement for the bulk of a batch: one statement step per 32 rows
# costs ~40 % less CPU than one per row (measured: 1.6 vs 2.5 us a row), and
# the sqlite3 module lets go of the GIL once per step, not once per row.
# 32 x 17 = 544 parameters, under SQLite's oldest limit of 999.
_ROWS_PER_INSERT = 32
_INSERT_MANY = _INSERT_INTO + ", ".join([_ROW] * _ROWS_PER_INSERT)
# With gs_int64_rows (gpuscope.store.bulk_rows): a batch in one statement, its rows as one blob, at most this many
# rows a statement (2.2 MB of values).
_INSERT_BLOB = insert_from_blob("event_log", _COLUMNS)
_ROWS_PER_BLOB = 16_384
_U64_COLUMNS = ("cgroup_id", "bytes", "handle", "stream", "arg0", "arg1", "cgroup_v1_id")
# Where each of gpuscope.store.blocks.BLOCK_COLUMNS is among the inserted columns.
BLOCK_INDEX = [_COLUMNS.index(c) for c in BLOCK_COLUMNS]


class EventRows:
    """Insert event batches as one session's ``event_log`` rows on ``conn``, naming each process by its ``comms`` id."""

    def __init__(self, conn: sqlite3.Connection, session_id: int) -> None:
        self._conn = conn
        self._session_id = session_id
        # Rows as one blob a statement where the extension loads; else values bound from Python.
        self.bulk_rows = load_bulk_rows(conn)
        self._comm_ids: dict[bytes, int] = {
            c.encode(): i for i, c in conn.execute("SELECT id, comm FROM comms").fetchall()
        }

    def insert(self, ev: np.ndarray, stack_hashes: np.ndarray | None) -> np.ndarray:
        """Insert the batch ``ev`` and each event's stack hash (0: none); return its rows' columns, one row a row."""
        n = len(ev)
        comm_col = self._comm_column(ev["comm"])
        cols = np.empty((n, _NCOLS), dtype=np.int64)
        cols[:, 0] = self._session_id
        cols[:, 1] = ev["ts_ns"].view(np.int64)
        cols[:, 2] = ev["duration_ns"].view(np.int64)
        cols[:, 3] = ev["pid"]
        cols[:, 4] = ev["tid"]
        cols[:, 5] = comm_col
        cols[:, 6] = ev["cgroup_id"].view(np.int64)
        cols[:, 7] = ev["op"]
        cols[:, 8] = ev["flags"]
        cols[:, 9] = ev["ret"]
        # Unsigned 64-bit values are stored as their two's complement: SQLite
        # integers are signed. Pointers and packed dims stay below 2**63.
        for i, name in enumerate(_U64_COLUMNS[1:], start=10):
            cols[:, i] = ev[name].view(np.int64)
        cols[:, 16] = 0 if stack_hashes is None else stack_hashes
        if self.bulk_rows:
            for at in range(0, n, _ROWS_PER_BLOB):
                self._conn.execute(_INSERT_BLOB, (cols[at : at + _ROWS_PER_BLOB].tobytes(),))
        else:
            bulk = n - n % _ROWS_PER_INSERT
            if bulk:
                self._conn.executemany(_INSERT_MANY, cols[:bulk].reshape(-1, _NCOLS * _ROWS_PER_INSERT).tolist())
            if bulk < n:
                self._conn.executemany(_INSERT, cols[bulk:].tolist())
        return cols

    def _comm_column(self, comms: np.ndarray) -> np.ndarray:
        # Group the 16-byte names through a 64-bit key (4x faster than unique
        # on bytes), then check the grouping exactly; fall back on a collision.
        words = np.ascontiguousarray(comms).view("<u8").reshape(-1, 2)
        key = words[:, 0] ^ (words[:, 1] * np.uint64(0x9E3779B97F4A7C15))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if not (words == words[first][inverse]).all():
            uniq_b, inverse = np.unique(comms, return_inverse=True)
            inverse = inverse.reshape(-1)
            names = uniq_b.tolist()
        else:
            names = comms[first].tolist()
        ids = np.empty(len(names), dtype=np.int64)
        for i, raw in enumerate(names):
            cid = self._comm_ids.get(raw)
            if cid is None:
                text = raw.decode("utf-8", "replace")
                self._conn.execute("INSERT OR IGNORE INTO comms(comm) VALUES (?)", (text,))
                cid = int(self._conn.execute("SELECT id FROM comms WHERE comm = ?", (text,)).fetchone()[0])
                self._comm_ids[raw] = cid
            ids[i] = cid
        return ids[inverse]


class PendingBlock:
    """Rows inserted but not yet in a column block (``gpuscope.store.blocks``): contiguous ids from ``first``."""

    def __init__(self) -> None:
        self.first = 0
        self.rows = 0
        self.since = 0.0
        self._parts: list[np.ndarray] = []

    @property
    def next_id(self) -> int:
        return self.first + self.rows

    def add(self, first: int, columns: np.ndarray) -> None:
        if not self.rows:
            self.first, self.since = first, time.monotonic()
        self._parts.append(columns)
        self.rows += len(columns)

    def take(self) -> tuple[int, np.ndarray]:
        out = (self.first, np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0])
        self.rows, self._parts = 0, []
        return out
