"""Count probed calls per process and what their probes cost, for ``gpuscope.agent.sampling.ProbeSampler``.

A batch of records is summed per process (``per_process``); the calls that
fell inside a window are added to that window's tally (``add_to_tally``);
running totals since the start (``Totals``) are snapshotted (``Mark``) for
rates over the recent past. Callers hold the sampler's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuscope.bpf.wire import Flag
from gpuscope.model.policy import SAMPLED_PROBE_OPS

# By op number: whether the op is probed in windows (a sampled op) rather than all the time.
IS_SAMPLED = np.zeros(65536, dtype=bool)
IS_SAMPLED[list(SAMPLED_PROBE_OPS)] = True
# The record flags a call's probe cost depends on: a single-stepped prologue, no return probe.
COST_FLAGS = int(Flag.STEPPED | Flag.ENTRY_ONLY)
# Ops from here on are host tracepoints, not probed calls.
FIRST_HOST_OP = 192


@dataclass
class Tally:
    """One window and, per process, the calls its probes recorded and what they cost (for the slowdown)."""

    start_ns: int
    end_ns: int | None = None  # None while open
    exact: bool = False  # a chunk of the first seconds, probed whole (not a window the budget set)
    procs: dict[int, list[float]] = field(default_factory=dict)  # pid -> [sampled calls, probe ns]
    threads: dict[int, set[int]] = field(default_factory=dict)


@dataclass
class Totals:
    """Cumulative per-process figures since the trace started."""

    always_ns: float = 0.0
    sampled_ns: float = 0.0
    calls: int = 0
    cpu_ns: int | None = None


@dataclass
class Mark:
    """A snapshot of the cumulative figures, for rates over the horizon."""

    mono_ns: int
    covered_ns: int
    procs: dict[int, Totals] = field(default_factory=dict)


PerProcess = dict[int, tuple[int, int, float, float]]
"""pid -> (probed calls, sampled calls, ns of the sampled ones, ns of the always-probed ones)."""


def per_process(pids: np.ndarray, sampled: np.ndarray, cost: np.ndarray) -> PerProcess:
    """A batch's probed calls and their cost per process; a batch of one process without grouping."""
    if not len(pids):
        return {}
    if pids.min() == pids.max():
        sampled_ns = float(cost[sampled].sum())
        return {int(pids[0]): (len(pids), int(np.count_nonzero(sampled)), sampled_ns, float(cost.sum()) - sampled_ns)}
    uniq, inverse = np.unique(pids, return_inverse=True)
    by_calls = np.bincount(inverse, minlength=len(uniq)).tolist()
    by_sampled = np.bincount(inverse, weights=sampled, minlength=len(uniq)).tolist()
    by_sampled_ns = np.bincount(inverse, weights=np.where(sampled, cost, 0.0), minlength=len(uniq)).tolist()
    by_all_ns = np.bincount(inverse, weights=cost, minlength=len(uniq)).tolist()
    return {
        int(p): (int(c), int(ns), float(sn), float(a - sn))
        for p, c, ns, sn, a in zip(uniq.tolist(), by_calls, by_sampled, by_sampled_ns, by_all_ns, strict=True)
    }


# Threads are counted on every this-many-th call of a batch: a thread making calls makes many.
_THREAD_STRIDE = 16


def add_to_tally(tally: Tally, per_pid: PerProcess, pids: np.ndarray, tids: np.ndarray) -> None:
    """Add a batch's calls inside a window to its tally (lock held)."""
    for pid, (_, n_sampled, sampled_ns, always_ns) in per_pid.items():
        acc = tally.procs.setdefault(pid, [0.0, 0.0])
        acc[0] += n_sampled
        acc[1] += sampled_ns + always_ns
    seen = np.unique((pids[::_THREAD_STRIDE].astype(np.int64) << 32) | tids[::_THREAD_STRIDE])
    for key in seen.tolist():
        tally.threads.setdefault(key >> 32, set()).add(key & 0xFFFFFFFF)
