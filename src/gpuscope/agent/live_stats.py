"""What the live view shows while recording: exact counts and latency histograms per op, and each tick."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op


@dataclass
class LiveStats:
    """Exact counts and streaming latency histograms per op, for the whole run.

    Mutated by the collector loop only; other threads (the live view's
    snapshot builder) read it through ``copy()``, which takes ``lock``.
    ``preemptors`` counts, per process (tgid) that took the CPU, how often a
    traced thread was preempted; ``preempted_ns`` is their total off-CPU time.
    """

    per_op: dict[int, LatencyHistogram] = field(default_factory=dict)
    events: int = 0
    preempted: int = 0
    pids: set[int] = field(default_factory=set)
    preempted_ns: int = 0
    preemptors: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, ev: np.ndarray) -> list[int]:
        """Fold a batch in; return pids seen for the first time."""
        with self.lock:
            return self._update(ev)

    def _update(self, ev: np.ndarray) -> list[int]:
        self.events += len(ev)
        ops = ev["op"]
        for op in np.unique(ops).tolist():
            sel = ops == op
            hist = self.per_op.get(op)
            if hist is None:
                hist = self.per_op[op] = LatencyHistogram.empty()
            hist.add(ev["duration_ns"][sel])
            if op == Op.sched_switch:
                preempted = ev[sel][ev["arg0"][sel] != 0]
                self.preempted += len(preempted)
                self.preempted_ns += int(preempted["duration_ns"].sum())
                tgids, counts = np.unique(preempted["handle"] >> np.uint64(32), return_counts=True)
                for tgid, n in zip(tgids.tolist(), counts.tolist(), strict=True):
                    self.preemptors[tgid] = self.preemptors.get(tgid, 0) + n
        new = [p for p in np.unique(ev["pid"]).tolist() if p not in self.pids]
        self.pids.update(new)
        return new

    def copy(self) -> LiveStats:
        """A consistent private copy, safe to take from any thread (cost: one histogram copy per op)."""
        with self.lock:
            return LiveStats(
                {op: h.copy() for op, h in self.per_op.items()},
                self.events,
                self.preempted,
                set(self.pids),
                self.preempted_ns,
                dict(self.preemptors),
            )


@dataclass(frozen=True, slots=True)
class Tick:
    elapsed_s: float
    events: int
    events_per_s: float
    dropped: int
    pending_batches: int
