"""Thread lanes for the dashboard's timeline: what each thread that calls CUDA did, reduced to pixels.

For each thread (the busiest first), for each of ``width`` equal intervals of
the window: the share of it the thread spent inside GPU calls (runtime,
driver, NCCL), inside NCCL calls alone (collectives, per rank: the lane
carries its process's rank when the recording knows it), preempted (runnable
while another task had its CPU), off its CPU by its own choice (a sleep, a
wait, I/O), and in direct memory reclaim (the kernel freeing pages on its
time before it could allocate), and per interval who held its CPU most while
it was preempted there. The server sends these
fractions, never the events: a lane of a million calls is ``width`` numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.frame import GPU_CALLS, EventFrame
from gpuscope.analysis.intervals import distinct, merge, overlap_ns
from gpuscope.model.ops import OPS, Op, Source, op_name

SCHED = int(Op.sched_switch)
RECLAIM = int(Op.direct_reclaim)
MAX_WIDTH = 2_000
MAX_LANES = 32
MAX_PREEMPTORS = 3
MAX_PIXEL_PREEMPTORS = 8
NCCL_CALLS = frozenset(int(op) for op, info in OPS.items() if info.source is Source.NCCL)


@dataclass(frozen=True, slots=True)
class Lane:
    """One thread's shares of each pixel interval (each in [0, 1]), and its time in GPU calls in all."""

    pid: int
    tid: int
    comm: str | None
    gpu: np.ndarray
    preempted: np.ndarray
    blocked: np.ndarray
    gpu_ns: int
    # Who held its CPU while it was preempted, most time first (at most MAX_PREEMPTORS): (pid, comm, ns).
    preemptors: tuple[tuple[int, str | None, int], ...] = ()
    nccl: np.ndarray | None = None  # its shares in NCCL calls (None: it made none)
    rank: int | None = None  # its process's rank, when the recording knows it
    reclaim: np.ndarray | None = None  # its shares in direct memory reclaim (None: it had none)
    # Per pixel, which of ``ops`` took most of its GPU-call time there (-1: none): its GPU band coloured by op.
    ops: tuple[str, ...] = ()
    top_op: np.ndarray | None = None
    # Per pixel, which of ``held_by`` (pid, comm) held its CPU most while it was preempted there (-1: none).
    held_by: tuple[tuple[int, str | None], ...] = ()
    top_preemptor: np.ndarray | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "comm": self.comm,
            "gpu_ns": self.gpu_ns,
            "gpu": np.round(self.gpu, 3).tolist(),
            "preempted": np.round(self.preempted, 3).tolist(),
            "blocked": np.round(self.blocked, 3).tolist(),
            "preemptors": [{"pid": p, "comm": c, "ns": ns} for p, c, ns in self.preemptors],
            "nccl": np.round(self.nccl, 3).tolist() if self.nccl is not None else None,
            "rank": self.rank,
            "reclaim": np.round(self.reclaim, 3).tolist() if self.reclaim is not None else None,
            "ops": list(self.ops),
            "top_op": self.top_op.tolist() if self.top_op is not None else None,
            "held_by": [{"pid": p, "comm": c} for p, c in self.held_by],
            "top_preemptor": self.top_preemptor.tolist() if self.top_preemptor is not None else None,
        }


@dataclass(frozen=True, slots=True)
class LaneIntervals:
    """One thread's time in a window as merged intervals: what its lane is made of at any width.

    Reading them costs a pass over the window's events per thread; reducing them to pixels (``reduce_lanes``)
    only a binary search per interval, so a span's intervals are kept and every width asked for is cheap.
    """

    pid: int
    tid: int
    comm: str | None
    gpu: tuple[np.ndarray, np.ndarray]
    preempted: tuple[np.ndarray, np.ndarray]
    blocked: tuple[np.ndarray, np.ndarray]
    gpu_ns: int
    preemptors: tuple[tuple[int, str | None, int], ...]
    nccl: tuple[np.ndarray, np.ndarray] | None
    rank: int | None
    reclaim: tuple[np.ndarray, np.ndarray] | None
    ops: tuple[str, ...]
    per_op: tuple[tuple[np.ndarray, np.ndarray], ...]  # each of ``ops``' calls, merged
    held_by: tuple[tuple[int, str | None], ...]
    per_preemptor: tuple[tuple[np.ndarray, np.ndarray], ...]  # each of ``held_by``'s preemptions, merged


def lane_intervals(
    frame: EventFrame,
    start_ns: int,
    end_ns: int,
    max_lanes: int = MAX_LANES,
    ranks: Mapping[int, int] | None = None,
) -> list[LaneIntervals]:
    """The merged intervals of the threads that made GPU calls in [start_ns, end_ns), busiest first (see
    ``thread_lanes``)."""
    end_ns = max(end_ns, start_ns + 1)
    f = frame
    calls = np.flatnonzero(np.isin(f.op, np.fromiter(GPU_CALLS, dtype=np.int64)))
    nccl_ops = np.fromiter(NCCL_CALLS, dtype=np.int64)
    sched = np.flatnonzero(f.op == SCHED)
    reclaims = np.flatnonzero(f.op == RECLAIM)
    keys = (f.pid[calls].astype(np.int64) << 32) | f.tid[calls].astype(np.int64)
    sched_keys = (f.pid[sched].astype(np.int64) << 32) | f.tid[sched].astype(np.int64)
    reclaim_keys = (f.pid[reclaims].astype(np.int64) << 32) | f.tid[reclaims].astype(np.int64)
    window = (np.array([start_ns], dtype=np.int64), np.array([end_ns], dtype=np.int64))
    out = []
    for key in distinct(keys).tolist():
        pid, tid = key >> 32, key & 0xFFFFFFFF
        mine = calls[keys == key]
        gpu = _merged(f, mine)
        collective = mine[np.isin(f.op[mine], nccl_ops)]
        off = sched[sched_keys == key]
        preempted = f.arg0[off] != 0
        pre, vol = off[preempted], off[~preempted]
        rec = reclaims[reclaim_keys == key]
        ids = distinct(f.op[mine]).tolist()
        pre_in = pre[(f.ts[pre] < end_ns) & (f.ts[pre] + f.dur[pre] > start_ns)]
        preemptors, held_by, groups = _preemption(f, pre_in)
        out.append(
            LaneIntervals(
                pid,
                tid,
                f.comm(pid),
                gpu,
                _merged(f, pre),
                _merged(f, vol),
                int(overlap_ns(*window, *gpu)[0]),
                preemptors,
                _merged(f, collective) if len(collective) else None,
                (ranks or {}).get(int(pid)),
                _merged(f, rec) if len(rec) else None,
                tuple(op_name(int(op)) for op in ids),
                tuple(_merged(f, mine[f.op[mine] == op]) for op in ids),
                held_by,
                tuple(_merged(f, g) for g in groups),
            )
        )
    out.sort(key=lambda x: (-x.gpu_ns, x.pid, x.tid))
    return out[:max_lanes]


def reduce_lanes(found: list[LaneIntervals], start_ns: int, end_ns: int, width: int) -> list[Lane]:
    """The lanes of ``found`` at ``width`` pixel intervals of [start_ns, end_ns) (at most ``MAX_WIDTH``)."""
    width = max(1, min(width, MAX_WIDTH))
    end_ns = max(end_ns, start_ns + width)
    edges = start_ns + (np.arange(width + 1, dtype=np.int64) * (end_ns - start_ns)) // width
    q_start, q_end = edges[:-1], edges[1:]
    size = np.maximum(q_end - q_start, 1).astype(np.float64)

    def share(iv: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        covered: np.ndarray = np.minimum(overlap_ns(q_start, q_end, *iv) / size, 1.0)
        return covered

    return [
        Lane(
            x.pid,
            x.tid,
            x.comm,
            share(x.gpu),
            share(x.preempted),
            share(x.blocked),
            x.gpu_ns,
            x.preemptors,
            share(x.nccl) if x.nccl is not None else None,
            x.rank,
            share(x.reclaim) if x.reclaim is not None else None,
            x.ops,
            _busiest_per_pixel(x.per_op, q_start, q_end),
            x.held_by,
            _busiest_per_pixel(x.per_preemptor, q_start, q_end) if x.per_preemptor else None,
        )
        for x in found
    ]


def thread_lanes(
    frame: EventFrame,
    start_ns: int,
    end_ns: int,
    width: int,
    max_lanes: int = MAX_LANES,
    ranks: Mapping[int, int] | None = None,
) -> list[Lane]:
    """The lanes of the threads that made GPU calls in [start_ns, end_ns), busiest first (see the module);
    ``ranks``: each process's rank (pid -> rank), where known."""
    width = max(1, min(width, MAX_WIDTH))
    end_ns = max(end_ns, start_ns + width)
    return reduce_lanes(lane_intervals(frame, start_ns, end_ns, max_lanes, ranks), start_ns, end_ns, width)


def _merged(f: EventFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return merge(f.ts[rows], f.ts[rows] + f.dur[rows])


def _process_name(f: EventFrame, pid: int) -> str | None:
    return f.comm(pid) or ("swapper" if pid == 0 else None)


def _preemption(
    f: EventFrame, pre: np.ndarray
) -> tuple[tuple[tuple[int, str | None, int], ...], tuple[tuple[int, str | None], ...], list[np.ndarray]]:
    """Who held a thread's CPU while it was preempted (``pre``: its switches out while runnable, in the window),
    by process, most time first: (the first MAX_PREEMPTORS with their ns; the first MAX_PIXEL_PREEMPTORS, and
    the rows of each, whose lane shows per pixel the one that held it most there). The preemptor is in each
    switch's handle (its pid, shifted)."""
    if not len(pre):
        return (), (), []
    who = f.handle[pre] >> 32
    pids, at = np.unique(who, return_inverse=True)
    held = np.bincount(at.reshape(-1), weights=f.dur[pre].astype(np.float64))
    first = np.argsort(-held, kind="stable")[:MAX_PIXEL_PREEMPTORS].tolist()  # at least MAX_PREEMPTORS
    named = tuple((int(pids[i]), _process_name(f, int(pids[i]))) for i in first)
    totals = tuple((*named[k], int(held[i])) for k, i in enumerate(first[:MAX_PREEMPTORS]))
    return totals, named, [pre[who == pids[i]] for i in first]


def _busiest_per_pixel(
    groups: tuple[tuple[np.ndarray, np.ndarray], ...], q_start: np.ndarray, q_end: np.ndarray
) -> np.ndarray:
    """Per pixel, the index of the group of merged intervals that covers most of it, -1 where none does."""
    time = np.zeros((len(groups), len(q_start)), dtype=np.int64)
    for i, (s, e) in enumerate(groups):
        time[i] = overlap_ns(q_start, q_end, s, e)
    if not len(groups):
        return np.full(len(q_start), -1, dtype=np.int64)
    return np.where(time.max(axis=0) > 0, time.argmax(axis=0), -1)
