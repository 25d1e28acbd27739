"""The feeding thread waiting for the GIL: read once, for ``gil-bound`` and for the rules that defer to it.

Read from what the thread did, not from who woke it (a timer's wakeup is
recorded in whatever task the interrupt hit): the feeding thread's short
voluntary waits outside its CUDA calls (≤ 20 ms, at least 20, together ≥ 15 % of the time) and its
preemptions by its own threads, during which another thread of its process
was on a CPU running Python: that thread held the GIL for at least half of
them, read as its on-CPU samples inside them plus the time it was preempted
inside them (a thread preempted mid-bytecode keeps the GIL, so on a contended
machine the feeding thread waits for it while the holder waits for a CPU).
Without samples, no claim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.cpu_profile import hot_functions
from gpuscope.analysis.frame import GPU_WORK
from gpuscope.analysis.intervals import distinct, merge, overlap_ns
from gpuscope.stacks.profile import HotFunction

MIN_WAITS = 20
WAIT_MAX_NS = 20_000_000
SHARE = 0.15
HOLDER_ON_CPU = 0.5


@dataclass(frozen=True)
class GilWaits:
    """The feeding threads' waits (start/end, CLOCK_MONOTONIC ns) while ``holder`` ran Python."""

    pid: int
    start: np.ndarray
    end: np.ndarray
    holder: int
    hot: tuple[HotFunction, ...]
    samples: int
    holder_on_cpu: float  # the share of the waits the holder held the GIL: on a CPU (by samples) or preempted
    wall_ns: int

    @property
    def waited_ns(self) -> int:
        return int((self.end - self.start).sum())


def gil_waits(ctx: Context, pid: int) -> GilWaits | None:
    """The process's GIL waits, or None where its feeding thread does not wait for another of its threads (read
    once a window: gil-bound reports it, data-starvation leaves the process to it)."""
    return ctx.reading("gil-waits", pid, lambda: _gil_waits(ctx, pid))


def _gil_waits(ctx: Context, pid: int) -> GilWaits | None:
    samples = ctx.cpu_samples
    if samples is None or not len(samples) or samples.hz <= 0:
        return None
    f, s = ctx.frame, ctx.sched
    fed = np.fromiter(distinct(f.tid[ctx.calls[ctx.pid_calls_of(pid, GPU_WORK)]]).tolist(), np.int64)
    mine = s[(f.pid[s] == pid) & np.isin(f.tid[s], fed)]
    waits = mine[(f.arg0[mine] == 0) & (f.arg1[mine] != 0) & (f.dur[mine] <= WAIT_MAX_NS)]
    waits = waits[~_inside_calls(ctx, pid, waits)]
    # Losing the race for the GIL also shows as being preempted by the holder taking the CPU back.
    pre = np.intersect1d(ctx.preempting, mine)
    pre = pre[((f.handle[pre] >> 32) == pid) & ((f.handle[pre] & 0xFFFFFFFF) != f.tid[pre])]
    rows = np.concatenate([waits, pre])
    if len(rows) < MIN_WAITS:
        return None
    ws, we = f.ts[rows], f.ts[rows] + f.dur[rows]
    wall = ctx.pid_span_ns(pid)
    waited = int((we - ws).sum())
    if waited < SHARE * wall:
        return None
    pos = samples.within({pid}, ws, we)
    pos = pos[~np.isin(samples.tid[pos], fed)]
    if not len(pos):
        return None
    tids, counts = np.unique(samples.tid[pos], return_counts=True)
    holder = int(tids[int(np.argmax(counts))])
    pos = pos[samples.tid[pos] == holder]
    held = len(pos) / (waited * samples.hz / 1e9) + _preempted_in(ctx, pid, holder, ws, we) / waited
    hot = tuple(h for h in hot_functions(samples, pos) if h.python)
    if len(pos) < 5 or held < HOLDER_ON_CPU or not hot:
        return None  # no other thread of it ran Python meanwhile: a wait for something else
    return GilWaits(pid, ws, we, holder, hot, len(pos), min(held, 1.0), wall)


def _preempted_in(ctx: Context, pid: int, tid: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """The time thread ``tid`` was runnable but off a CPU inside the intervals (by anyone, the tracer too)."""
    f, s = ctx.frame, ctx.sched
    off = s[(f.pid[s] == pid) & (f.tid[s] == tid) & (f.arg0[s] != 0)]
    if not len(off):
        return 0
    os_, oe = merge(f.ts[off], f.ts[off] + f.dur[off])
    ws, we = merge(starts, ends)
    return int(overlap_ns(ws, we, os_, oe).sum())


def _inside_calls(ctx: Context, pid: int, rows: np.ndarray) -> np.ndarray:
    """Per sched row: whether it starts inside a recorded call of its thread (a wait for the GPU, not the GIL:
    the call released the GIL, and it is taken back after the call returns)."""
    f = ctx.frame
    out = np.zeros(len(rows), dtype=bool)
    for tid in distinct(f.tid[rows]).tolist():
        at = f.tid[rows] == tid
        cs, ce = ctx.thread_call_spans(pid, tid)
        i = np.searchsorted(cs, f.ts[rows[at]], "right") - 1
        out[at] = (i >= 0) & (f.ts[rows[at]] < ce[np.maximum(i, 0)])
    return out
