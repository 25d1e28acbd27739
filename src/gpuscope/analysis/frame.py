"""Load stored events into column arrays: one SELECT, no Python loop per event.

The analysis never touches SQLite rows one by one: ``load_frame`` fills numpy
columns from a single query over ``event_log`` (the table, not the ``events``
view, so no join per row), restricted to the analysis window.
"""

from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass

import numpy as np

from gpuscope.model.ops import OPS, Op, OpKind, Source

_CHUNK = 262_144
# Fewer Python objects per row is what makes loading fast: tid, pid and op are
# packed into one integer (tid < 2**22, pid < 2**22, op < 256), and columns an
# op's rules never read are selected as 0 (a cached small int).
_NEEDS_DETAIL = "op_id >= 128 OR op_id IN ({ops})"
_SELECT_TMPL = (
    "ts_ns, duration_ns, (tid << 30) | (pid << 8) | op_id, "
    "CASE WHEN {detail} THEN cgroup_id ELSE 0 END, "
    "CASE WHEN {detail} THEN bytes ELSE 0 END, "
    "CASE WHEN {detail} THEN handle ELSE 0 END, "
    "CASE WHEN op_id >= 128 THEN stream ELSE 0 END, "
    "CASE WHEN {detail} THEN arg0 ELSE 0 END, "
    "CASE WHEN op_id >= 128 THEN arg1 ELSE 0 END"
)
_NCOLS = 9


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
    """Columns of the events in a window, sorted by ts_ns. All int64."""

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
        mask: np.ndarray = np.isin(self.op, np.fromiter(ops, dtype=np.int64, count=len(ops)))
        return mask

    @classmethod
    def from_columns(cls, cols: list[np.ndarray], comms: dict[int, str], cgroups: dict[int, int]) -> EventFrame:
        """Build from columns in ``_FIELDS`` order."""
        ts, dur, pid, tid, op, cgroup, nbytes, handle, stream, arg0, arg1 = cols
        return cls(ts, dur, pid, tid, op, cgroup, nbytes, handle, stream, arg0, arg1, comms, cgroups)

    def select(self, mask: np.ndarray) -> EventFrame:
        return EventFrame.from_columns([getattr(self, c)[mask] for c in _FIELDS], self.comms, self.cgroups)

    def comm(self, pid: int | None) -> str | None:
        return self.comms.get(int(pid)) if pid is not None else None


_FIELDS = ("ts", "dur", "pid", "tid", "op", "cgroup", "bytes", "handle", "stream", "arg0", "arg1")


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
_DETAIL_OPS = COPY_OPS | LAUNCH_OPS | ALLOC_OPS | FREE_OPS | ops_of(OpKind.ALLOC, OpKind.FREE, OpKind.SET)
_SELECT = _SELECT_TMPL.format(detail=_NEEDS_DETAIL.format(ops=",".join(map(str, sorted(_DETAIL_OPS)))))


def recording_bounds(conn: sqlite3.Connection) -> tuple[int, int, int, tuple[int, ...]]:
    """(first ts, last end, wall offset, session ids) of everything recorded."""
    # Both through the ts index: the last end is among the calls that started in the final minute.
    lo, last = conn.execute("SELECT min(ts_ns), max(ts_ns) FROM event_log").fetchone()
    hi = None
    if last is not None:
        (hi,) = conn.execute(
            "SELECT max(ts_ns + duration_ns) FROM event_log WHERE ts_ns >= ?", (int(last) - 60_000_000_000,)
        ).fetchone()
    sessions = conn.execute("SELECT id, started_wall_ns - started_mono_ns FROM sessions ORDER BY id").fetchall()
    offset = int(sessions[-1][1]) if sessions else 0
    if lo is None:
        return 0, 0, offset, tuple(int(s[0]) for s in sessions)
    return int(lo), int(hi if hi is not None else lo), offset, tuple(int(s[0]) for s in sessions)


def load_frame(conn: sqlite3.Connection, start_ns: int, end_ns: int, pids: tuple[int, ...] = ()) -> EventFrame:
    """Every event that overlaps [start_ns, end_ns] (optionally of some pids), as columns.

    Host events of other processes are always kept when ``pids`` is given:
    a sched_switch names its preemptor through its own columns, not its pid,
    so filtering is done on the traced side only.
    """
    where = "ts_ns <= ? AND ts_ns + duration_ns >= ?"
    params: list[int] = [end_ns, start_ns]
    if pids:
        where += f" AND (pid IN ({','.join('?' * len(pids))}) OR op_id >= 128)"
        params += list(pids)
    # Upper bound on the rows, from the rowid range (no scan); np.empty only touches the pages it fills.
    lo_id, hi_id = conn.execute("SELECT min(rowid), max(rowid) FROM event_log").fetchone()
    cap = 0 if lo_id is None else int(hi_id) - int(lo_id) + 1
    raw = [np.empty(cap, dtype=np.int64) for _ in range(_NCOLS)]
    cur = conn.execute(f"SELECT {_SELECT} FROM event_log WHERE {where}", params)
    n = 0
    while True:
        rows = cur.fetchmany(_CHUNK)
        if not rows:
            break
        k = min(len(rows), cap - n)  # rows appended after the bound was read are left for the next run
        flat = np.fromiter(itertools.chain.from_iterable(rows[:k]), dtype=np.int64, count=k * _NCOLS)
        block = flat.reshape(-1, _NCOLS)
        for j in range(_NCOLS):
            raw[j][n : n + k] = block[:, j]
        n += k
        if n >= cap:
            break
    raw = [r[:n] for r in raw]
    ts = raw[0]
    if n > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        # Rows are stored in arrival order, which is time order except across CPUs' ring-buffer batches.
        order = np.argsort(ts, kind="stable")
        raw = [r[order] for r in raw]
    packed = raw[2]
    cols = [raw[0], raw[1], (packed >> 8) & 0x3FFFFF, packed >> 30, packed & 0xFF, *raw[3:]]
    del raw, packed
    comms, cgroups = _process_names(conn, np.unique(cols[2]).tolist())
    return EventFrame.from_columns(cols, comms, cgroups)


def _process_names(conn: sqlite3.Connection, pids: list[int]) -> tuple[dict[int, str], dict[int, int]]:
    comms: dict[int, str] = {}
    cgroups: dict[int, int] = {}
    for pid, comm, cg in conn.execute("SELECT pid, comm, cgroup_id FROM processes ORDER BY session_id"):
        if comm:
            comms[int(pid)] = str(comm)
        if cg:
            cgroups[int(pid)] = int(cg)
    # The latest comm an event of the process carried, when the processes table lacks it:
    # scanned from the newest row back, so it stops at the first hit.
    for pid in pids:
        if pid in comms:
            continue
        row = conn.execute(
            "SELECT c.comm FROM event_log e JOIN comms c ON c.id = e.comm_id WHERE e.pid = ? ORDER BY e.id DESC LIMIT 1",
            (pid,),
        ).fetchone()
        if row:
            comms[pid] = str(row[0])
    return comms, cgroups
