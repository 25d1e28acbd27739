"""Load stored events and their exact aggregates into column arrays, no Python loop per event.

The analysis never touches SQLite rows one by one: ``load_frame`` fills numpy
columns from the chunks of a single query over ``event_log`` (the table, not
the ``events`` view, so no join per row), restricted to the analysis window.
``load_aggregates`` decodes ``event_aggregates`` (exact per-second counts of
every event, stored as a row or not): counts, rates and percentiles come from
there when a recording has them, so they do not depend on the storage mode.
The SQL behind both lives in ``gpuscope.store``; decoding the rows is done here.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpuscope.analysis.intervals import distinct
from gpuscope.analysis.side_thread import Background
from gpuscope.model.latency import NBUCKETS
from gpuscope.model.op_table import in_ops
from gpuscope.model.ops import OPS, Op, OpKind, Source
from gpuscope.model.policy import SAMPLE_EVERY
from gpuscope.store.aggregates_read import aggregate_rows, aggregates_cover_recording
from gpuscope.store.blocks import BlockError
from gpuscope.store.blocks_read import block_coverage, frame_block_chunks, rows_between
from gpuscope.store.events_read import (
    FRAME_FIELDS,
    FRAME_ROW_WIDTH,
    OP_MASK,
    PACKED_PID_SHIFT,
    PACKED_TID_SHIFT,
    PID_MASK,
    FrameFilter,
    FrameSink,
    event_id_span,
    event_span,
    frame_row_chunks,
)
from gpuscope.store.processes_read import latest_event_comm, pids_of_sessions, process_rows
from gpuscope.store.sessions_read import session_flag_docs, session_wall_offsets

# One row in this many of a thinned op is read: the sample selective storage keeps.
THIN_SAMPLE = SAMPLE_EVERY


def process_names(conn: sqlite3.Connection) -> tuple[dict[int, str], dict[int, int]]:
    """Return each recorded pid's comm and cgroup id (the newest session's where several name a pid)."""
    comms: dict[int, str] = {}
    cgroups: dict[int, int] = {}
    for pid, comm, cg in process_rows(conn):
        if comm:
            comms[pid] = str(comm)
        if cg:
            cgroups[pid] = int(cg)
    return comms, cgroups


@dataclass(frozen=True, slots=True)
class Window:
    """The analysed interval in CLOCK_MONOTONIC ns, and the recording it lies in."""

    start_ns: int
    end_ns: int
    recording_start_ns: int
    recording_end_ns: int
    wall_offset_ns: int  # add to a monotonic ts to get wall-clock ns
    session_ids: tuple[int, ...]
    events: int = 0
    # The sessions chosen from the file, in words ("session 3"); None when the whole file is read.
    part: str | None = None

    @property
    def length_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def as_dict(self) -> dict[str, int | list[int]]:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "start_wall_ns": self.start_ns + self.wall_offset_ns,
            "end_wall_ns": self.end_ns + self.wall_offset_ns,
            "length_ns": self.length_ns,
            "recording_start_ns": self.recording_start_ns,
            "recording_end_ns": self.recording_end_ns,
            "session_ids": list(self.session_ids),
            "events": self.events,
        }


@dataclass(frozen=True, slots=True)
class EventFrame:
    """Columns of the events in a window, sorted by ts_ns.

    int64, except as ``load_frame`` reads a recording: pid int32, op int16, and
    tid, cgroup, bytes, stream, arg0 and arg1 int32 where every value of the
    window fits (frames built otherwise may hold int64 there too). The handle
    is always int64: it is shifted (a preemptor's pid and tid in one).
    """

    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    op: np.ndarray
    cgroup: np.ndarray
    bytes: np.ndarray
    handle: np.ndarray
    stream: np.ndarray
    arg0: np.ndarray
    arg1: np.ndarray
    comms: dict[int, str]
    cgroups: dict[int, int]

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        end: np.ndarray = self.ts + self.dur
        return end

    def mask_ops(self, ops: frozenset[int]) -> np.ndarray:
        return in_ops(self.op, ops)

    @classmethod
    def from_columns(cls, cols: list[np.ndarray], comms: dict[int, str], cgroups: dict[int, int]) -> EventFrame:
        """Build from columns in ``_FIELDS`` order."""
        ts, dur, pid, tid, op, cgroup, nbytes, handle, stream, arg0, arg1 = cols
        return cls(ts, dur, pid, tid, op, cgroup, nbytes, handle, stream, arg0, arg1, comms, cgroups)

    def select(self, mask: np.ndarray) -> EventFrame:
        return EventFrame.from_columns([getattr(self, c)[mask] for c in _FIELDS], self.comms, self.cgroups)

    def comm(self, pid: int | None) -> str | None:
        return self.comms.get(int(pid)) if pid is not None else None


_FIELDS = FRAME_FIELDS


def ops_of(*kinds: OpKind, gpu: bool = True) -> frozenset[int]:
    """Op ids of the given kinds (CUDA runtime and driver only when ``gpu``)."""
    return frozenset(int(i.op) for i in OPS.values() if i.kind in kinds and ((i.source is not Source.HOST) == gpu))


GPU_CALLS = ops_of(*OpKind)
SYNC_OPS = ops_of(OpKind.SYNC)
COPY_OPS = ops_of(OpKind.COPY)
LAUNCH_OPS = ops_of(OpKind.LAUNCH)
ALLOC_OPS = frozenset({int(Op.cudaMalloc), int(Op.cuMemAlloc), int(Op.cudaMallocManaged), int(Op.cuMemAllocManaged)})
FREE_OPS = frozenset({int(Op.cudaFree), int(Op.cuMemFree)})
GPU_WORK = SYNC_OPS | COPY_OPS | LAUNCH_OPS | ops_of(OpKind.SET)
# GPU ops whose rules read their detail columns (cgroup, bytes, handle, arg0); others load them as 0.
_DETAIL_OPS = COPY_OPS | LAUNCH_OPS | ALLOC_OPS | FREE_OPS | ops_of(OpKind.ALLOC, OpKind.FREE, OpKind.SET)


def recording_bounds(conn: sqlite3.Connection) -> tuple[int, int, int, tuple[int, ...]]:
    """(first ts, last end, wall offset, session ids) of everything recorded."""
    span = event_span(conn)
    sessions = session_wall_offsets(conn)
    offset = sessions[-1][1] if sessions else 0
    lo, hi = span if span is not None else (0, 0)
    return lo, hi, offset, tuple(sid for sid, _ in sessions)


def load_frame(
    conn: sqlite3.Connection,
    start_ns: int,
    end_ns: int,
    pids: tuple[int, ...] = (),
    thin: dict[tuple[int, int], int] | None = None,
) -> EventFrame:
    """Every event that overlaps [start_ns, end_ns] (optionally of some pids), as columns.

    Host events of other processes are always kept when ``pids`` is given:
    a sched_switch names its preemptor through its own columns, not its pid,
    so filtering is done on the traced side only.

    ``thin`` maps (pid, op) of high-rate ops to a duration threshold: of those
    only calls slower than it and one row in ``THIN_SAMPLE`` are read, the
    shape selective storage gives them (their counts come from aggregates).
    """
    # Upper bound on the rows, from the rowid range (no scan); np.empty only touches the pages it fills.
    cap = event_id_span(conn)
    try:
        cols = _gather(_frame_parts(conn, start_ns, end_ns, pids, thin, blocks=True), cap)
    except BlockError:  # a block gpuscope did not write: every row is read as a row
        cols = _gather(_frame_parts(conn, start_ns, end_ns, pids, thin, blocks=False), cap)
    n = len(cols[0])
    ts = cols[0]
    if n > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        # Rows are stored in arrival order, which is time order except across CPUs' ring-buffer batches.
        order = np.argsort(ts, kind="stable")
        del ts
        for j in range(len(cols)):
            cols[j] = cols[j][order]  # one column at a time: the old one is freed before the next is copied
    comms, cgroups = _process_names(conn, distinct(cols[2]).tolist())
    return EventFrame.from_columns(cols, comms, cgroups)


# The frame's columns as gathered (FRAME_FIELDS order). Ids in the fewest bytes that hold them (pids have
# 22 bits, ops 8): a frame of millions of rows is gathered and compared by id in every rule. The detail
# columns that are never shifted (not the handle: a pointer, or a pid and tid in one) start as int32, which
# their values mostly fit (tids, cgroup ids, sizes, flags), and are widened when one does not.
_GATHER_DTYPES = tuple(np.dtype(t) for t in ("i8", "i8", "i4", "i4", "i2", "i4", "i4", "i8", "i4", "i4", "i4"))
_WIDENED = frozenset(FRAME_FIELDS.index(f) for f in ("tid", "cgroup", "bytes", "stream", "arg0", "arg1"))
_I32 = np.iinfo(np.int32)


class _Part(Protocol):
    """Rows for the frame: ``rows`` of them; ``write`` puts the first ``sink.rows`` into ``sink``."""

    rows: int

    def write(self, sink: FrameSink) -> None: ...


class _RowPart:
    """A chunk of rows fetched through SQL (``frame_row_chunks``), as the frame's columns."""

    def __init__(self, rows: list[tuple[int, ...]]) -> None:
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * FRAME_ROW_WIDTH)
        self._block = flat.reshape(-1, FRAME_ROW_WIDTH)
        self.rows = len(rows)

    def write(self, sink: FrameSink) -> None:
        b = self._block[: sink.rows]
        packed = b[:, 2]
        sink.put(0, b[:, 0])
        sink.put(1, b[:, 1])
        sink.put(2, (packed >> PACKED_PID_SHIFT) & PID_MASK)
        sink.put(3, packed >> PACKED_TID_SHIFT)
        sink.put(4, packed & OP_MASK)
        for j in range(3, FRAME_ROW_WIDTH):
            sink.put(j + 2, b[:, j])


class _Columns:
    """The frame's columns as they fill, at most ``cap`` rows: narrow until a value does not fit."""

    def __init__(self, cap: int) -> None:
        # np.empty only touches the pages that are filled.
        self.arrays = [np.empty(cap, dtype=d) for d in _GATHER_DTYPES]
        self.n = 0

    def sink(self, rows: int) -> _Sink:
        """Where the next ``rows`` rows go (one part, written by one thread at a time)."""
        out = _Sink(self, self.n, rows)
        self.n += rows
        return out

    def widen(self, j: int, upto: int) -> None:
        wide = np.empty(len(self.arrays[j]), dtype=np.int64)
        wide[:upto] = self.arrays[j][:upto]
        self.arrays[j] = wide


class _Sink:
    def __init__(self, columns: _Columns, start: int, rows: int) -> None:
        self._columns, self._start, self.rows = columns, start, rows

    def put(self, column: int, values: np.ndarray) -> None:
        arrays, a = self._columns.arrays, self._start
        if (
            column in _WIDENED
            and arrays[column].dtype != np.int64
            and len(values)
            and not _I32.min <= int(values.min()) <= int(values.max()) <= _I32.max
        ):
            self._columns.widen(column, a)
        arrays[column][a : a + self.rows] = values


def _gather(parts: Iterator[_Part], cap: int) -> list[np.ndarray]:
    """The parts' rows end to end in one array per column (``FRAME_FIELDS``), at most ``cap`` (rows appended
    after the bound was read wait for the next run). Each part writes straight into them, in their final
    types, and no part is copied twice.
    """
    columns = _Columns(cap)
    # A part writes its rows on a second thread while this one reads and filters the next: both are mostly
    # numpy, which lets go of the interpreter lock. One write at a time, so at most two parts are alive, and
    # only the writing thread touches the columns (a column is widened there).
    writing: Background | None = None
    try:
        for part in parts:
            k = min(part.rows, cap - columns.n)
            if writing is not None:
                writing.finish()
            writing = Background(functools.partial(part.write, columns.sink(k)), name="gpuscope-frame")
            if columns.n >= cap:
                break
    finally:
        if writing is not None:
            writing.finish()
    return [a[: columns.n] for a in columns.arrays]


def _frame_parts(
    conn: sqlite3.Connection,
    start_ns: int,
    end_ns: int,
    pids: tuple[int, ...],
    thin: dict[tuple[int, int], int] | None,
    *,
    blocks: bool,
) -> Iterator[_Part]:
    """The frame's rows in id order: from column blocks where they cover the rows (``blocks``), else rows.

    Raises BlockError for a block gpuscope did not write.
    """

    filt = FrameFilter(start_ns, end_ns, _DETAIL_OPS, THIN_SAMPLE, pids, thin)

    def rows(ids: tuple[int, int] | None = None) -> Iterator[_RowPart]:
        return (_RowPart(chunk) for chunk in frame_row_chunks(conn, filt, ids=ids))

    coverage = block_coverage(conn) if blocks else None
    if coverage is None:
        yield from rows()
        return
    for first, last, run in coverage.spans():
        if run is not None:
            yield from frame_block_chunks(conn, run, filt)
        elif rows_between(conn, first, last):
            yield from rows((-(2**63) if first == coverage.bottom else first, last))


def _process_names(conn: sqlite3.Connection, pids: list[int]) -> tuple[dict[int, str], dict[int, int]]:
    comms, cgroups = process_names(conn)
    # The latest comm an event of the process carried, when the processes table lacks it.
    for pid in pids:
        if pid in comms:
            continue
        comm = latest_event_comm(conn, pid)
        if comm is not None:
            comms[pid] = comm
    return comms, cgroups


# Selective storage samples these; everything else it stores row by row (gpuscope.agent.storage_policy).
SAMPLED_OPS = COPY_OPS | LAUNCH_OPS | ops_of(OpKind.SET) | frozenset({int(Op.sched_wakeup)})
_HIST_DTYPE = np.dtype([("idx", "<u2"), ("n", "<u4")])  # gpuscope.store.aggregates.encode_hist
BUCKET_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Aggregates:
    """Exact per-second counts of every event in a window (``event_aggregates`` rows), all int64.

    Row arrays are parallel (one entry per (bucket, pid, op)); ``hists`` holds
    the merged 1/16-octave latency histogram of each (pid, op) over the window.
    Buckets are whole seconds: a window that starts or ends inside a second
    counts that whole second.
    """

    bucket: np.ndarray
    pid: np.ndarray
    op: np.ndarray
    count: np.ndarray
    stored: np.ndarray
    sum_ns: np.ndarray
    min_ns: np.ndarray
    max_ns: np.ndarray
    bytes: np.ndarray
    hists: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.bucket)

    @property
    def events(self) -> int:
        return int(self.count.sum())

    def mask(self, pid: int | None = None, ops: frozenset[int] | None = None) -> np.ndarray:
        m = np.ones(len(self.bucket), dtype=bool) if pid is None else self.pid == pid
        if ops is not None:
            m &= np.isin(self.op, np.fromiter(ops, dtype=np.int64, count=len(ops)))
        return m

    def count_of(self, pid: int | None = None, ops: frozenset[int] | None = None) -> int:
        return int(self.count[self.mask(pid, ops)].sum())

    def sum_ns_of(self, pid: int | None = None, ops: frozenset[int] | None = None) -> int:
        return int(self.sum_ns[self.mask(pid, ops)].sum())

    def op_keys(self) -> list[tuple[int, int]]:
        """Every (pid, op) with events in the window."""
        return sorted(self.hists)

    def hist(self, pid: int | None, op: int) -> np.ndarray:
        """Merged histogram of an op, of one process or (pid None) of all."""
        if pid is not None:
            return self.hists.get((pid, op), np.zeros(NBUCKETS, dtype=np.int64))
        out = np.zeros(NBUCKETS, dtype=np.int64)
        for (_, o), h in self.hists.items():
            if o == op:
                out += h
        return out

    def first_bucket(self, pid: int, op: int) -> int:
        m = (self.pid == pid) & (self.op == op)
        return int(self.bucket[m].min()) if m.any() else 0


def load_aggregates(
    conn: sqlite3.Connection, start_ns: int, end_ns: int, pids: tuple[int, ...] = ()
) -> Aggregates | None:
    """The aggregates of the seconds [start_ns, end_ns] touches, or None when they cannot be trusted.

    None (the caller falls back to rows) when the database has no
    ``event_aggregates`` (older files, imported recordings), when a session
    with events has no aggregates (counts would miss its events), or when
    they hold values or histograms gpuscope never writes.
    """
    if not aggregates_cover_recording(conn):
        return None
    rows = aggregate_rows(conn, start_ns, end_ns, BUCKET_NS, pids)
    n = len(rows)
    try:
        cols = np.array([r[:9] for r in rows], dtype=np.int64).reshape(n, 9)
    except (TypeError, ValueError, OverflowError):
        return None  # values gpuscope never writes (a file changed by hand): the rows are read instead
    blobs: dict[tuple[int, int], list[bytes]] = {}
    for r in rows:
        if r[9]:
            if not isinstance(r[9], bytes) or len(r[9]) % _HIST_DTYPE.itemsize:
                return None  # not a histogram encode_hist wrote: likewise
            blobs.setdefault((int(r[1]), int(r[2])), []).append(r[9])
    hists: dict[tuple[int, int], np.ndarray] = {}
    for key, parts in blobs.items():
        arr = np.frombuffer(b"".join(parts), dtype=_HIST_DTYPE)
        merged = np.bincount(arr["idx"].astype(np.int64), weights=arr["n"].astype(np.float64), minlength=NBUCKETS)
        hists[key] = merged[:NBUCKETS].astype(np.int64)
    for p, o in zip(cols[:, 1].tolist(), cols[:, 2].tolist(), strict=True):
        hists.setdefault((p, o), np.zeros(NBUCKETS, dtype=np.int64))
    c = [np.ascontiguousarray(cols[:, j]) for j in range(9)]
    return Aggregates(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], hists)


def pids_without_frees(conn: sqlite3.Connection) -> frozenset[int] | None:
    """Processes of sessions imported from a recorder that never saw frees (Ingero); None: all of them.

    Without frees every allocation looks leaked, so memory-leak must stay
    silent for these. None when every session is such an import.
    """
    docs = session_flag_docs(conn)
    imported = [sid for sid, doc in docs.items() if doc.get("imported_from") == "ingero"]
    if docs and len(imported) == len(docs):
        return None
    return pids_of_sessions(conn, imported)
