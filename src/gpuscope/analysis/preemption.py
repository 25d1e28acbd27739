"""Who took a traced process's CPU during its calls: the preemptors, by the time they held it.

Shared by cpu-preemption and noisy-neighbour (which keeps the preemptors of another cgroup).
"""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.intervals import attribute_merged, distinct, first_of_each
from gpuscope.analysis.workers import family
from gpuscope.model.findings import Culprit
from gpuscope.model.units import fmt_ns


def preemptors(ctx: Context, pid: int, other_cgroup_only: bool = False) -> tuple[list[str], tuple[Culprit, ...]]:
    """Which tasks took the CPU from this process's threads during its calls, by overlapped time.

    The tracer is never one of them (``Context.preempting``): its CPU time is
    the measured overhead of recording, reported apart, not a task to move.
    The process's own threads and forked children (DataLoader workers) are
    named as its own; with ``other_cgroup_only`` they are left out, as a
    neighbour they are not.
    """
    f, s = ctx.frame, ctx.preempting
    s = s[f.pid[s] == pid]
    own = family(ctx, pid)
    if other_cgroup_only:
        s = s[(f.stream[s] != f.cgroup[s]) & ~np.isin(f.handle[s] >> 32, np.fromiter(own, dtype=np.int64))]
    by_task: dict[int, int] = {}
    for tid in distinct(f.tid[s]).tolist():
        st = s[f.tid[s] == tid]
        qs, qe = ctx.thread_call_spans(pid, tid)
        for label, t in attribute_merged(qs, qe, f.ts[st], f.ts[st] + f.dur[st], f.handle[st]).items():
            by_task[label] = by_task.get(label, 0) + t
    total = sum(by_task.values()) or 1
    by_pid: dict[int, int] = {}
    for h, t in by_task.items():
        by_pid[h >> 32] = by_pid.get(h >> 32, 0) + t
    # Each preemptor's cgroup as its first row names it.
    preemptor, first = first_of_each(f.handle[s] >> 32)
    cg_of = dict(zip(preemptor.tolist(), f.stream[s[first]].tolist(), strict=True))
    culprits = tuple(
        Culprit(
            "preemptor",
            p,
            comm=ctx.frame.comm(p) or ("swapper" if p == 0 else None),
            cgroup_id=cg_of.get(p) or None,
            share=t / total,
            time_ns=t,
        )
        for p, t in sorted(by_pid.items(), key=lambda kv: -kv[1])[:5]
    )
    lines = [
        f"preempted during its calls by {_whose(c, pid, own)}{c.label()}: {fmt_ns(c.time_ns or 0)} "
        f"({(c.share or 0):.0%})"
        for c in culprits[:3]
    ]
    return lines, culprits


def _whose(c: Culprit, pid: int, own: frozenset[int]) -> str:
    """How a preemptor relates to the preempted process: its own thread, its own forked worker, or neither."""
    if c.pid == pid:
        return "its own threads: "
    return "its own worker process (a forked child) " if c.pid in own else ""
