"""The single writer: a thread that turns decoded event batches into rows.

Batches come in through a bounded queue. When SQLite cannot keep up, ``put``
blocks, the collector stops draining, the BPF ring fills and the kernel side
counts every record it cannot reserve: an event is either stored or counted
as dropped, never lost in between.

Everything else a recording writes (the session row, processes, cgroups,
stacks, aggregates) goes through the same queue as a named store function,
``writer.write(insert_cgroup, cgroup, seen_ns)``, in order with the events:
callers hand over data, the SQL stays in ``gpuscope.store``.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec

import numpy as np

__all__ = ["EventWriter", "events_end_ns"]

P = ParamSpec("P")

_INSERT = (
    "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
    "bytes, handle, stream, arg0, arg1, cgroup_v1_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_U64_COLUMNS = ("cgroup_id", "bytes", "handle", "stream", "arg0", "arg1", "cgroup_v1_id")


def events_end_ns(conn: sqlite3.Connection) -> int:
    """Return when the last stored event ends (0 when there are none), so new events can start after it."""
    (end,) = conn.execute("SELECT max(ts_ns + duration_ns) FROM event_log").fetchone()
    return int(end or 0)


@dataclass(frozen=True, slots=True)
class _Write:
    """A named write queued for the writer thread: ``fn(conn, *args, **kwargs)`` inside its transaction."""

    fn: Callable[..., object]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Maintenance:
    """A function queued for the writer thread to run between transactions."""

    fn: Callable[..., object]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class EventWriter:
    """Own one writer connection on a background thread."""

    def __init__(self, conn: sqlite3.Connection, session_id: int, *, max_pending: int = 64) -> None:
        self._conn = conn
        self._session_id = session_id
        self._queue: queue.Queue[np.ndarray | _Write | _Maintenance | None] = queue.Queue(max_pending)
        self._comm_ids: dict[bytes, int] = {
            c.encode(): i for i, c in conn.execute("SELECT id, comm FROM comms").fetchall()
        }
        self.rows_written = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gpuscope-writer", daemon=True)
        self._thread.start()

    # -- producer side -------------------------------------------------------

    def put(self, events: np.ndarray) -> None:
        """Queue a batch; blocks while the writer is behind (backpressure)."""
        if self.error is not None:
            raise self.error
        if len(events):
            self._queue.put(events)

    def write(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Run the named store write ``fn(conn, *args, **kwargs)`` on the writer thread, in order with events.

        It runs inside the writer's current transaction, so it must not commit.
        Blocks while the writer is behind, like ``put``.
        """
        self._queue.put(_Write(fn, args, kwargs))

    def call_fn(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Run ``fn(conn, *args, **kwargs)`` on the writer thread, outside any transaction, in order."""
        self._queue.put(_Maintenance(fn, args, kwargs))

    def pending(self) -> int:
        """Return how many items wait in the queue (a gauge of how far behind the writer is)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Flush everything queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    # -- writer thread -------------------------------------------------------

    def _run(self) -> None:
        conn = self._conn
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                conn.execute("BEGIN")
                # Coalesce whatever else is already queued into one transaction.
                while True:
                    if isinstance(item, _Write):
                        item.fn(conn, *item.args, **item.kwargs)
                    elif isinstance(item, _Maintenance):
                        # Maintenance (retention, checkpoints) runs between transactions.
                        conn.execute("COMMIT")
                        item.fn(conn, *item.args, **item.kwargs)
                        conn.execute("BEGIN")
                    else:
                        self._insert(item)
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        conn.execute("COMMIT")
                        return
                    item = nxt
                conn.execute("COMMIT")
        except BaseException as exc:  # surfaced to the producer on its next put()
            self.error = exc
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            # Keep draining so a blocked producer is released.
            while True:
                try:
                    if self._queue.get(timeout=1) is None:
                        return
                except queue.Empty:
                    return

    def _insert(self, ev: np.ndarray) -> None:
        n = len(ev)
        comm_col = self._comm_column(ev["comm"])
        cols = np.empty((n, 16), dtype=np.int64)
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
        self._conn.executemany(_INSERT, cols.tolist())
        self.rows_written += n

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
