"""Fakes of the live view's inputs: a scripted collector, a frozen clock, a fixed system bar.

Used by the snapshot tests and to render sample screens for the docs
without tracing anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.platform.system import SystemSampler, SystemStats
from gpuscope.tui.live_snapshot import CollectorSample, Header, LibraryInfo

GIB = 1 << 30


class FrozenClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FixedSystem(SystemSampler):
    """A system sampler that always reads the same numbers."""

    def __init__(self, stats: SystemStats | None = None) -> None:
        super().__init__()
        self.stats = stats or SystemStats(
            cpu_pct=47.0, mem_pct=72.0, mem_available_bytes=11 * GIB, load1=3.2, swap_used_bytes=0, cpus=16
        )

    def sample(self) -> SystemStats:
        return self.stats


def histogram(durations_ns: Iterable[int]) -> LatencyHistogram:
    h = LatencyHistogram.empty()
    h.add(np.asarray(list(durations_ns), dtype=np.uint64))
    return h


class FakeCollector:
    """A collector whose cumulative state the test sets call by call.

    ``add(op, durations)`` folds calls in, as the real collector would; every
    ``sample()`` returns independent copies.
    """

    def __init__(self, header: Header | None = None) -> None:
        self._header = header or sample_header()
        self.per_op: dict[int, LatencyHistogram] = {}
        self.events = 0
        self.dropped = 0
        self.processes = 1
        self.preempted = 0
        self.preempted_ns = 0
        self.preemptors: dict[int, int] = {}
        # The overhead budget, as a session's sampler reports it (see CollectorSample).
        self.sampled_ops: frozenset[int] = frozenset()
        self.covered_ns = 0
        self.elapsed_ns = 0
        self.budget: float | None = None
        self.self_costs: tuple[tuple[int, float], ...] = ()

    def add(self, op: int, durations_ns: Iterable[int]) -> None:
        values = np.asarray(list(durations_ns), dtype=np.uint64)
        self.per_op.setdefault(op, LatencyHistogram.empty()).add(values)
        self.events += len(values)

    def preempt(self, by_tgid: int, off_cpu_ns: Iterable[int]) -> None:
        """Record preempted sched_switches of traced threads (by ``by_tgid``)."""
        values = list(off_cpu_ns)
        self.add(Op.sched_switch, values)
        self.preempted += len(values)
        self.preempted_ns += sum(values)
        self.preemptors[by_tgid] = self.preemptors.get(by_tgid, 0) + len(values)

    def header(self) -> Header:
        return self._header

    def sample(self) -> CollectorSample:
        per_op: Mapping[int, LatencyHistogram] = {op: h.copy() for op, h in self.per_op.items()}
        return CollectorSample(
            per_op=per_op,
            events=self.events,
            dropped=self.dropped,
            processes=self.processes,
            preempted=self.preempted,
            preempted_ns=self.preempted_ns,
            preemptors=dict(self.preemptors),
            sampled_ops=self.sampled_ops,
            covered_ns=self.covered_ns,
            elapsed_ns=self.elapsed_ns,
            budget=self.budget,
            self_costs=self.self_costs,
        )


def sample_header() -> Header:
    return Header(
        targets="command: python train.py",
        libraries=(
            LibraryInfo("cudart", "/opt/venv/lib/nvidia/cuda_runtime/lib/libcudart.so.12", "12", 18),
            LibraryInfo("cuda", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "550.54.15", 12),
        ),
        host_tracepoints=(
            "sched_switch",
            "sched_wakeup",
            "sched_process_fork",
            "sched_process_exec",
            "sched_process_exit",
        ),
        probe_mode="uprobe_multi",
        db_path="/var/lib/gpuscope/gpuscope.db",
    )
