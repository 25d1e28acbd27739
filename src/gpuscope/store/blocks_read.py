"""Read the analysis frame from column blocks (``gpuscope.store.blocks``), with the row path's filters in numpy.

``frame_block_chunks`` yields exactly the rows ``events_read.frame_row_chunks``
would for the same ids and the same ``FrameFilter`` (window, process and
thinning filters, and the same zeroed columns), written as columns straight
into the frame instead of fetched as row tuples.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from gpuscope.model.op_table import in_ops
from gpuscope.model.ops import FIRST_HOST_OP_ID
from gpuscope.store.blocks import BLOCK_COLUMNS, BlockError, parse_block, widen
from gpuscope.store.events_read import (
    DETAIL_OP_FLOOR,
    OP_MASK,
    PID_MASK,
    FrameFilter,
    FrameSink,
    window_floor,
)

# Rows decoded at a time: four columns of them widened at once (8 MB), beside what the frame keeps. Small
# enough that a file of 1M rows is read in four groups, each written into the frame while the next is read
# (with 1M-row groups, 1M explain took 0.40 s against 0.29, and 50 MiB more; 10M the same either way).
GROUP_ROWS = 1 << 18
_TS, _DUR, _PID, _TID, _OP, _CGROUP, _BYTES, _HANDLE, _STREAM, _ARG0, _ARG1 = range(len(BLOCK_COLUMNS))
_NO_OP = -1  # the op of a row that does not exist (SQL's NULL in the row path's test)


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which of a recording's row ids blocks hold: runs of blocks with contiguous ids, and the rows' id range."""

    # Per run, in id order: its blocks' first id, rows, min ts and max end, one row per block.
    runs: tuple[np.ndarray, ...]
    bottom: int  # the smallest and largest row id when the coverage was read
    top: int

    def spans(self) -> Iterator[tuple[int, int, np.ndarray | None]]:
        """(first id, last id, the run's blocks; None for ids read as rows) from the first row on, in id order.

        The last span reaches past ``top``: rows appended since are read as rows.
        """
        cursor = self.bottom
        for run in self.runs:
            first, last = int(run[0, 0]), int(run[-1, 0] + run[-1, 1]) - 1
            if first > cursor:
                yield cursor, first - 1, None
            yield first, last, run
            cursor = last + 1
        yield cursor, 2**63 - 1, None


def block_coverage(conn: sqlite3.Connection) -> Coverage | None:
    """The runs of blocks with contiguous ids, all of whose rows exist; None when there is none.

    Reads only the blocks' small columns (one row per block). Several runs
    come from a merge (each input's rows keep their ids where free) or from
    a block dropped by a trigger; the ids between them are read as rows.
    """
    try:
        meta = conn.execute(
            "SELECT first_id, rows, min_ts_ns, max_end_ns FROM event_blocks ORDER BY first_id"
        ).fetchall()
    except sqlite3.OperationalError:
        return None  # a file older than blocks
    if not meta:
        return None
    try:
        arr = np.array(meta, dtype=np.int64).reshape(len(meta), 4)
    except (TypeError, ValueError, OverflowError):
        return None  # values gpuscope never writes: read rows
    ends = arr[:, 0] + arr[:, 1]
    if bool((arr[:, 1] <= 0).any()) or bool((arr[1:, 0] < ends[:-1]).any()):
        return None  # empty or overlapping blocks: not as gpuscope writes them
    (bottom,) = conn.execute("SELECT min(rowid) FROM event_log").fetchone()
    (top,) = conn.execute("SELECT max(rowid) FROM event_log").fetchone()
    if top is None or int(ends[-1]) - 1 > int(top) or int(arr[0, 0]) < int(bottom):
        return None  # blocks of rows that are gone (a file changed without its triggers)
    breaks = np.flatnonzero(arr[1:, 0] != ends[:-1]) + 1
    return Coverage(tuple(np.split(arr, breaks)), int(bottom), int(top))


def rows_between(conn: sqlite3.Connection, first_id: int, last_id: int) -> bool:
    """Whether any row has an id in [first_id, last_id] (one search of the rowid b-tree)."""
    return (
        conn.execute("SELECT 1 FROM event_log WHERE id BETWEEN ? AND ? LIMIT 1", (first_id, last_id)).fetchone()
        is not None
    )


def frame_block_chunks(conn: sqlite3.Connection, run: np.ndarray, filt: FrameFilter) -> Iterator[BlockPart]:
    """Yield the rows ``filt`` keeps of a run of blocks (``Coverage.runs``), a group of blocks at a time.

    Each part puts its rows' frame columns (``events_read.FRAME_FIELDS``) into
    the caller's ``FrameSink``. Only the columns the filters test are widened for every
    row; the others only for the rows kept, straight into the frame. Raises
    BlockError for a block gpuscope did not write; the caller reads rows instead.
    """
    start_ns, end_ns, pids, thin = filt.start_ns, filt.end_ns, filt.pids, filt.thin
    floor = window_floor(conn, start_ns)
    chosen = run[(run[:, 3] >= start_ns) & (run[:, 2] <= end_ns)]
    thin_ops = frozenset(o for _, o in thin) if thin else None
    thresholds = _Thresholds(thin) if thin else None
    pid_set = np.asarray(pids, dtype=np.int64)
    carried = (-1, _NO_OP)  # the id after the last row read and its op, for the first row of the next group
    i = 0
    while i < len(chosen):
        j, total = i, 0
        while j < len(chosen) and (total == 0 or total + chosen[j, 1] <= GROUP_ROWS):
            total += int(chosen[j, 1])
            j += 1
        group = _Group(conn, chosen[i:j], total)
        i = j
        ts, dur, op = group.full(_TS), group.full(_DUR), group.full(_OP)
        pid = group.full(_PID) if pids or thin else None
        low = max(start_ns, floor) if floor is not None else start_ns
        if int(ts.min()) >= low and int(dur.min()) >= 0 and int(ts.max()) + int(dur.max()) <= end_ns:
            mask = np.ones(len(ts), dtype=bool)  # every row inside the window (four reductions): no test per row
        else:
            mask = ts <= end_ns
            mask &= ts + dur >= start_ns
            if floor is not None:
                mask &= ts >= floor
        if pids and pid is not None:
            mask &= np.isin(pid, pid_set) | (op >= FIRST_HOST_OP_ID)
        if thresholds is not None and thin_ops is not None and pid is not None:
            _thin(conn, mask, (op, pid, dur), group, carried, thresholds, thin_ops, filt.keep_every)
        carried = (int(group.meta[-1, 0] + group.meta[-1, 1]), int(op[-1]))
        kept = np.flatnonzero(mask)
        del mask
        yield BlockPart(group, kept, (ts, dur, op, pid), filt.detail_ops)


class _Group:
    """Consecutive blocks read together: their columns parsed, widened to int64 on demand."""

    def __init__(self, conn: sqlite3.Connection, meta: np.ndarray, total: int) -> None:
        self.meta = meta
        self.total = total
        # Row offset of each block in the group, and the group's end.
        self.starts = np.concatenate(([0], np.cumsum(meta[:, 1])))
        self.columns: list[list[tuple[int, np.ndarray | None]]] = []
        want = meta[:, 0].tolist()
        for lo in range(0, len(want), 500):
            ids = want[lo : lo + 500]
            rows = conn.execute(
                f"SELECT first_id, rows, columns FROM event_blocks WHERE first_id IN ({','.join('?' * len(ids))}) "
                "ORDER BY first_id",
                ids,
            ).fetchall()
            if [r[0] for r in rows] != ids:
                raise BlockError("a column block went away while it was read")
            self.columns += [parse_block(blob, n) for _first, n, blob in rows]

    def full(self, j: int) -> np.ndarray:
        """Column ``j`` of every row."""
        out = np.empty(self.total, dtype=np.int64)
        for b, cols in enumerate(self.columns):
            widen(*cols[j], out[self.starts[b] : self.starts[b + 1]])
        return out

    def take(self, j: int, kept: np.ndarray, out: np.ndarray) -> None:
        """Column ``j`` of the rows at ``kept`` (sorted positions in the group), into ``out``."""
        cut = np.searchsorted(kept, self.starts)
        for b, cols in enumerate(self.columns):
            a, z = int(cut[b]), int(cut[b + 1])
            if a == z:
                continue
            base, offsets = cols[j]
            widen(base, None if offsets is None else offsets[kept[a:z] - self.starts[b]], out[a:z])


def _op_of_row(conn: sqlite3.Connection, row_id: int) -> int:
    row = conn.execute("SELECT op_id FROM event_log WHERE id = ?", (row_id,)).fetchone()
    return _NO_OP if row is None or type(row[0]) is not int else int(row[0])


class _Thresholds:
    """The slow-call threshold of each thinned (pid, op), looked up for many rows at once (-1: not thinned)."""

    def __init__(self, thin: Mapping[tuple[int, int], int]) -> None:
        pids = {p for p, _ in thin}
        # One thinned process, the usual case: a table by op (the rows asked about are of thinned ops).
        self._pid = next(iter(pids)) if len(pids) == 1 else None
        self._table = np.full(max(o for _, o in thin) + 1, -1, dtype=np.int64)
        for (_, o), threshold in thin.items():
            self._table[o] = threshold
        # Several: one binary search per row among the (pid, op) keys.
        self._keys = np.array(sorted((p << 16) | o for p, o in thin), dtype=np.int64)
        self._values = np.array([thin[(int(k) >> 16, int(k) & 0xFFFF)] for k in self._keys] + [-1], dtype=np.int64)

    def of(self, pid: np.ndarray, op: np.ndarray) -> np.ndarray:
        """Per row (its pid and op, the op a thinned one): its threshold, or -1 where its (pid, op) is not thinned."""
        if self._pid is not None:
            found: np.ndarray = self._table[op]
            found[pid != self._pid] = -1
            return found
        key = pid << 16
        key |= op
        at = np.searchsorted(self._keys, key)
        at[self._keys[np.minimum(at, len(self._keys) - 1)] != key] = len(self._keys)
        del key
        found = self._values[at]
        return found


def _thin(
    conn: sqlite3.Connection,
    mask: np.ndarray,
    cols: tuple[np.ndarray, np.ndarray, np.ndarray],
    group: _Group,
    carried: tuple[int, int],
    thresholds: _Thresholds,
    thin_ops: frozenset[int],
    keep_every: int,
) -> None:
    """Clear ``mask`` where the row path's thinning drops a row.

    Of a thinned (pid, op) the row path keeps one row in ``keep_every`` (by
    id), calls slower than its threshold, and the first of a run (the row
    before is another op). Only rows still in ``mask`` are looked at.
    """
    op, pid, dur = cols
    idx = np.flatnonzero(mask & in_ops(op, thin_ops))
    if not len(idx):
        return
    starts, first_ids = group.starts[:-1], group.meta[:, 0]
    meets = first_ids[1:] == first_ids[:-1] + group.meta[:-1, 1]  # block k+1's ids follow block k's
    if bool(np.all(meets)):
        # The group's blocks hold consecutive ids: the rows whose id is a multiple are every keep_every-th
        # position, marked once (a division per row costs more than the whole mark).
        every = np.zeros(group.total, dtype=bool)
        every[-int(first_ids[0]) % keep_every :: keep_every] = True
        kept = every[idx]
        del every
    else:
        block = np.searchsorted(starts, idx, side="right") - 1
        ids = first_ids[block] + (idx - starts[block])
        kept = ids % keep_every == 0
        del ids
    kept |= dur[idx] > thresholds.of(pid[idx], op[idx])
    previous = idx - 1
    np.maximum(previous, 0, out=previous)
    before = op[previous]
    del previous
    # A block's first row: its previous row is the block before's last only when their ids meet.
    carried_end, carried_op = carried
    for k, first in enumerate(first_ids.tolist()):
        row = int(np.searchsorted(idx, starts[k]))
        if row == len(idx) or idx[row] != starts[k]:
            continue
        if k > 0 and meets[k - 1]:
            continue
        before[row] = carried_op if first == carried_end else _op_of_row(conn, first - 1)
    kept |= (before != _NO_OP) & ~in_ops(before, thin_ops)
    mask[idx[~kept]] = False


class BlockPart:
    """The rows a group of blocks gives the frame: ``rows`` of them, written by ``write``."""

    def __init__(
        self,
        group: _Group,
        kept: np.ndarray,
        widened: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
        detail_ops: frozenset[int],
    ) -> None:
        """``widened``: the group's ts, duration, op and (when read) pid columns, every row."""
        self._group, self._kept, self._detail_ops = group, kept, detail_ops
        self._ts, self._dur, self._op, self._pid = widened
        self.rows = len(kept)

    def write(self, sink: FrameSink) -> None:
        """Put the row path's select list of the first ``sink.rows`` rows into ``sink``, column by column.

        Columns zeroed that a row's op's rules never read, and ids masked as the packed row path's are.
        """
        group = self._group
        kept = self._kept[: sink.rows]
        op = self._op[kept]
        host = op >= DETAIL_OP_FLOOR
        detail = host | in_ops(op, self._detail_ops)
        sink.put(0, self._ts[kept])
        sink.put(1, self._dur[kept])
        values = np.empty(len(kept), dtype=np.int64)  # one scratch column: the sink copies what it is given
        if self._pid is None:
            group.take(_PID, kept, values)
        else:
            np.take(self._pid, kept, out=values)
        values &= PID_MASK
        sink.put(2, values)
        group.take(_TID, kept, values)
        sink.put(3, values)
        op &= OP_MASK
        sink.put(4, op)
        for column, j in enumerate((_CGROUP, _BYTES, _HANDLE, _STREAM, _ARG0, _ARG1), start=5):
            group.take(j, kept, values)
            np.multiply(values, host if j in (_STREAM, _ARG1) else detail, out=values)
            sink.put(column, values)
