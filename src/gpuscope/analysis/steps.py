"""Host and GPU taking turns: a synchronisation every step, then host work with nothing queued.

One reading of a process's steps, shared by the rules that must agree on it:
``sync-in-loop`` reports it, ``data-starvation`` leaves a process to it unless
the GPU idles most of the time, and ``sync-stall`` leaves it alone (the GPU is
not the bottleneck when the host holds it idle between waits as long again).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import SYNC_OPS
from gpuscope.analysis.intervals import overlap_by_key
from gpuscope.model.op_table import in_ops

# At least this many steps; the waits and the host time after them each take this share of the wall time,
# in turns long enough to matter (below these, a step's wait and host work are launch-path noise).
MIN_STEPS = 10
TURN_SHARE = 0.15
MIN_WAIT_NS = 500_000
MIN_HOST_NS = 1_000_000


@dataclass(frozen=True)
class Turns:
    """A process's steps: each sync (frame rows), how long it waited, the interval after it to the next GPU
    call (``host_start``/``host_end``), and the time the thread ran in that interval (``host_on_cpu``)."""

    pid: int
    sync_rows: np.ndarray
    waits: np.ndarray
    host_start: np.ndarray
    host_end: np.ndarray
    host_on_cpu: np.ndarray
    wall_ns: int

    @property
    def waited_ns(self) -> int:
        return int(self.waits.sum())

    @property
    def host_ns(self) -> int:
        return int(self.host_on_cpu.sum())

    @property
    def saved_ns(self) -> int:
        """What overlapping them could save at most: per step, the shorter of the wait and the host work."""
        return int(np.minimum(self.waits, self.host_on_cpu).sum())


def sync_turns(ctx: Context, pid: int) -> Turns | None:
    """The process's steps when its host and GPU take turns; None when they do not (read once a window)."""
    return ctx.reading("sync-turns", pid, lambda: _sync_turns(ctx, pid))


def _sync_turns(ctx: Context, pid: int) -> Turns | None:
    f = ctx.frame
    rows = ctx.outer_work_rows(pid)
    is_sync = in_ops(f.op[rows], SYNC_OPS)
    after = np.flatnonzero(is_sync[:-1])
    if len(after) < MIN_STEPS:
        return None
    sync = rows[after]
    gs, ge = f.ts[sync] + f.dur[sync], f.ts[rows[after + 1]]
    gap = np.maximum(ge - gs, 0)
    if ctx.coverage is not None:
        # Launches are probed in windows: a gap reaching outside them may hide a step's work.
        gap = np.where(ctx.coverage.fully_covered(gs, ge), gap, 0)
    wall = ctx.pid_span_ns(pid)
    waits = f.dur[sync]
    # Host work is done on a CPU: the time after a wait counts as host work only where the thread ran. Time
    # it was preempted is cpu-preemption's; a thread mostly asleep after the wait is waiting for data.
    s = ctx.sched
    s = s[f.pid[s] == pid]
    off = overlap_by_key(f.tid[sync], gs, gs + gap, f.tid[s], f.ts[s], f.ts[s] + f.dur[s])
    host = np.maximum(gap - off, 0)
    if int(waits.sum()) < TURN_SHARE * wall or int(host.sum()) < TURN_SHARE * wall:
        return None
    if float(np.median(waits)) < MIN_WAIT_NS or float(np.median(host)) < MIN_HOST_NS:
        return None
    # Asleep, not preempted: on a contended machine the thread is runnable but off its CPU for much of the
    # host work, and that is still host work (made slower by the contention), not waiting for data.
    slept = s[f.arg0[s] == 0]
    asleep = overlap_by_key(f.tid[sync], gs, gs + gap, f.tid[slept], f.ts[slept], f.ts[slept] + f.dur[slept])
    if float(asleep.sum()) > 0.5 * max(float(gap.sum()), 1.0):
        return None
    return Turns(pid, sync, waits, gs, gs + gap, host, wall)
