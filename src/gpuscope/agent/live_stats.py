"""What the live view shows while recording: exact counts and latency histograms per op, and each tick."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op

# Host events the kernel reports for every process on the machine, not only the traced ones: recorded as
# possible causes (the I/O that queued ahead of ours, memory pressure), not counted as the job's own.
MACHINE_WIDE_OPS = frozenset(
    {int(Op.block_io), int(Op.tcp_retransmit), int(Op.direct_reclaim), int(Op.oom_kill), int(Op.mm_page_alloc)}
)


@dataclass
class LiveStats:
    """Exact counts and streaming latency histograms per op, for the whole run.

    Mutated by the collector loop only; other threads (the live view's
    snapshot builder) read it through ``copy()``, which takes ``lock``.
    ``preemptors`` counts, per process (tgid) that took the CPU, how often a
    traced thread was preempted; ``preempted_ns`` is their total off-CPU time.

    ``targets``: the traced processes (the roots added, and every child the
    kernel reports them forking), or None when every process is traced.
    ``per_op`` counts their own events; the machine-wide host events of other
    processes are counted apart, in ``others`` (op -> count) with the names
    that made them (``other_comms``).
    """

    per_op: dict[int, LatencyHistogram] = field(default_factory=dict)
    events: int = 0
    preempted: int = 0
    pids: set[int] = field(default_factory=set)
    preempted_ns: int = 0
    preemptors: dict[int, int] = field(default_factory=dict)
    targets: set[int] | None = None
    others: dict[int, int] = field(default_factory=dict)
    other_comms: dict[int, dict[str, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_target(self, pid: int) -> None:
        """A process traced from now on (with the children it forks); nothing to do when every process is."""
        with self.lock:
            if self.targets is not None:
                self.targets.add(pid)

    def update(self, ev: np.ndarray) -> list[int]:
        """Fold a batch in; return pids seen for the first time."""
        with self.lock:
            return self._update(ev)

    def _update(self, ev: np.ndarray) -> list[int]:
        self.events += len(ev)
        ops = ev["op"]
        if self.targets is not None:
            # A fork is reported before the child runs: its own events come after, in ring order.
            self.targets.update(ev["handle"][ops == Op.process_fork].tolist())
        traced: np.ndarray | None = None  # per event: made by a traced process (once a batch, if it has host events)
        for op in np.unique(ops).tolist():
            sel = ops == op
            if self.targets is not None and op in MACHINE_WIDE_OPS:
                if traced is None:
                    traced = np.isin(ev["pid"], np.fromiter(self.targets, dtype=np.int64, count=len(self.targets)))
                sel = self._own(ev, op, sel, traced)
                if not sel.any():
                    continue
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

    def _own(self, ev: np.ndarray, op: int, sel: np.ndarray, traced: np.ndarray) -> np.ndarray:
        """``sel`` narrowed to the traced processes' events of ``op``; the others counted apart, with their names."""
        own: np.ndarray = sel & traced
        theirs = ev[sel & ~own]
        if len(theirs):
            self.others[op] = self.others.get(op, 0) + len(theirs)
            names = self.other_comms.setdefault(op, {})
            for comm in theirs["comm"].tolist():
                name = comm.split(b"\0", 1)[0].decode("utf-8", "replace") or "(other processes)"
                names[name] = names.get(name, 0) + 1
        return own

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
                None if self.targets is None else set(self.targets),
                dict(self.others),
                {op: dict(names) for op, names in self.other_comms.items()},
            )


@dataclass(frozen=True, slots=True)
class Tick:
    elapsed_s: float
    events: int
    events_per_s: float
    dropped: int
    pending_batches: int
