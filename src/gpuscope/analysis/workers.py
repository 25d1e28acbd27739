"""A traced process's own worker processes: the children it forked (DataLoader workers, process pools).

Their CPU time is the process's own configuration (``num_workers``, the size of a pool, the threads each
worker starts), never a neighbour's: the rules that say who took a thread's CPU, or what kept the host busy
while the GPU waited, name them as the process's own with these, and their fix is that configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_count, fmt_ns

WORKER_FIX = (
    "keep DataLoader num_workers below the free cores (the main process needs one) and call "
    "torch.set_num_threads(1) in worker_init_fn, so each worker's own thread pool does not oversubscribe them too"
)


def family(ctx: Context, pid: int) -> frozenset[int]:
    """``pid`` and every process it forked in the window, directly or through its children."""
    found, todo = {pid}, [pid]
    while todo:
        for child in ctx.forks.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Workers:
    """The scheduling of a process's forked children in the window.

    ``pids``: every child; ``switches`` and ``off_ns``: how often their
    (recorded) threads went off the CPU and for how long, from the rows or,
    for a reference recording, its exact counts where they hold more;
    ``first_ns``/``last_ns``: when that switching was seen (0 without any).
    """

    parent: int
    pids: tuple[int, ...]
    switches: int
    off_ns: int
    first_ns: int
    last_ns: int

    def describe(self, ctx: Context) -> str:
        """One sentence: who the workers are and what their switching was."""
        who = f"its own {len(self.pids)} worker process{'es' if len(self.pids) > 1 else ''} (forked children, {_pids(self.pids)})"
        if not self.switches:
            return f"{who}: their scheduling is not in the recording"
        span = max(self.last_ns - self.first_ns, 1)
        start = ctx.window.start_ns
        return (
            f"{who} went off the CPU {fmt_count(self.switches)} times from +{fmt_ns(self.first_ns - start)} to "
            f"+{fmt_ns(self.last_ns - start)} ({self.switches / (span / 1e9):,.0f}/s), {fmt_ns(self.off_ns)} in all: "
            "the DataLoader's own workers (num_workers), not another process; when they outnumber the free cores "
            "they preempt each other and the feeding thread"
        )


def workers_of(ctx: Context, pid: int) -> Workers | None:
    """The children ``pid`` forked and their switching; None when it forked none in the window."""
    kids = sorted(family(ctx, pid) - {pid})
    if not kids:
        return None
    f, s = ctx.frame, ctx.sched
    rows = s[np.isin(f.pid[s], np.array(kids, dtype=np.int64))]
    switches, off = len(rows), int(f.dur[rows].sum())
    first = int(f.ts[rows].min()) if len(rows) else 0
    last = int((f.ts[rows] + f.dur[rows]).max()) if len(rows) else 0
    imp = ctx.imported_rates
    if imp is not None:
        # The reference may have counted switches it did not store: its counts, where they hold more.
        counted = [imp.totals.get((k, int(Op.sched_switch)), (0, 0, 0)) for k in kids]
        n, total = sum(c[0] for c in counted), sum(c[1] for c in counted)
        if n > switches:
            switches, off = n, max(off, total)
            spans = [imp.series[(k, int(Op.sched_switch))] for k in kids if (k, int(Op.sched_switch)) in imp.series]
            if spans:
                first = min([b for b, _ in spans] + ([first] if first else []))
                last = max(last, *(b + len(c) * imp.width_ns for b, c in spans))
    return Workers(pid, tuple(kids), switches, off, first, last)


def _pids(pids: tuple[int, ...]) -> str:
    if len(pids) == 1:
        return f"pid {pids[0]}"
    if pids[-1] - pids[0] == len(pids) - 1:
        return f"pids {pids[0]}–{pids[-1]}"
    return "pids " + ", ".join(str(p) for p in pids[:4]) + ("…" if len(pids) > 4 else "")


__all__ = ["WORKER_FIX", "Workers", "family", "workers_of"]
