"""Immutable snapshots of a running trace, built once a second on a background thread.

The collector loop owns the live statistics; ``SnapshotBuilder`` samples
them (a cheap copy of fixed-size histograms), keeps the last few samples and
derives windowed numbers by subtraction: histograms are additive, so the
histogram of an interval is the later one minus the earlier one. Nothing is
sorted and no sample is kept, so the cost per second is a few hundred
bucket subtractions per op whatever the event rate.

Views receive ``LiveSnapshot`` values (plain numbers and strings, frozen)
and only render them.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpuscope.model.latency import SUB, LatencyHistogram
from gpuscope.model.ops import Op, Source, op_name, source_of
from gpuscope.platform.system import SystemSampler, SystemStats

LAYER_TITLES = {Source.CUDA: "CUDA Runtime", Source.DRIVER: "CUDA Driver", Source.HOST: "Host"}
# Library kind (discovery) probed for each layer.
LAYER_LIBRARY = {Source.CUDA: "cudart", Source.DRIVER: "cuda"}
# Layers always shown, even empty; others (NCCL) appear once they have probes or events.
CORE_LAYERS = (Source.CUDA, Source.DRIVER, Source.HOST)


def layer_title(layer: Source) -> str:
    return LAYER_TITLES.get(layer, layer.name)


# A tail is flagged when p99 >= TAIL_RATIO x p50 (on the CUDA layers: host
# off-CPU times are heavy-tailed by nature).
TAIL_RATIO = 10.0
# A time-share jump is flagged when an op's share of its layer's API time in
# the last interval exceeds its share over the rest of the window by at least
# this many points (0.20 = 20 percentage points).
SHARE_JUMP = 0.20
# Host events whose duration is a time (off-CPU, I/O latency, reclaim stall);
# the others carry no duration or an aggregate in it.
TIMED_HOST_OPS = frozenset({Op.sched_switch, Op.block_io, Op.direct_reclaim})
FLAG_TAIL = "p99"
FLAG_SHARE = "share"


# -- what the builder reads --------------------------------------------------


@dataclass(frozen=True, slots=True)
class LibraryInfo:
    kind: str  # "cudart" or "cuda"
    path: str
    version: str
    probes: int


@dataclass(frozen=True, slots=True)
class Header:
    """What is being traced: changes rarely (a library attached later)."""

    targets: str = ""
    libraries: tuple[LibraryInfo, ...] = ()
    host_tracepoints: tuple[str, ...] = ()
    probe_mode: str = ""
    db_path: str = ""

    def probes(self, layer: Source) -> int:
        """Probes attached for a layer (host: tracepoints)."""
        if layer is Source.HOST:
            return len(self.host_tracepoints)
        kind = LAYER_LIBRARY.get(layer, layer.value)
        return sum(lib.probes for lib in self.libraries if lib.kind == kind)


@dataclass(frozen=True, slots=True)
class CollectorSample:
    """One private copy of the collector's cumulative state (never mutated after creation)."""

    per_op: Mapping[int, LatencyHistogram]
    events: int = 0
    dropped: int = 0
    processes: int = 0
    preempted: int = 0
    preempted_ns: int = 0
    preemptors: Mapping[int, int] = field(default_factory=dict)
    # The overhead budget: ops probed in windows, the time they were probed since the start (ns), and the
    # measured self-cost per process as (pid, share of its CPU time); budget None: every call probed.
    sampled_ops: frozenset[int] = frozenset()
    covered_ns: int = 0
    elapsed_ns: int = 0
    budget: float | None = None
    self_costs: tuple[tuple[int, float], ...] = ()


class CollectorSource(Protocol):
    """Where the builder reads from; called on the builder thread."""

    def header(self) -> Header: ...

    def sample(self) -> CollectorSample: ...


# -- what views receive -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op: cumulative count, last-interval rate, window percentiles."""

    op: int
    name: str
    layer: Source
    count: int  # since the start
    rate_per_s: float  # over the last interval
    window_count: int  # calls in the percentile window
    p50_ns: float
    p95_ns: float
    p99_ns: float
    max_ns: float
    time_share: float | None  # of the layer's API time in the window; None for host events
    flags: tuple[str, ...] = ()
    note: str = ""
    # Probed in windows (the overhead budget): count and rate are estimates from the calls seen, which were
    # ``seen``; the share of the time the windows covered since the start is ``coverage``.
    estimated: bool = False
    seen: int = 0
    coverage: float = 1.0


@dataclass(frozen=True, slots=True)
class Preemptions:
    """Preemptions of traced threads within the window."""

    count: int = 0
    off_cpu_ns: int = 0
    culprits: tuple[tuple[int, int], ...] = ()  # (tgid, preemptions), most first

    @property
    def avg_off_cpu_ns(self) -> float:
        return self.off_cpu_ns / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class LiveWindow:
    """What a finding source sees: this snapshot's rows and window deltas."""

    rows: tuple[OpRow, ...]
    window_s: float
    preemptions: Preemptions
    dropped_in_interval: int


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    header: Header
    elapsed_s: float
    events: int
    events_per_s: float
    dropped: int
    processes: int
    system: SystemStats
    window_s: float
    rows: tuple[OpRow, ...]
    findings: tuple[str, ...] = ()
    budget: float | None = None
    self_costs: tuple[tuple[int, float], ...] = ()  # (pid, share of its CPU time), measured

    def sampling_line(self) -> str:
        """gpuscope's measured cost and what is estimated, in one line ("" before anything is measured)."""
        parts = []
        if self.self_costs:
            worst = sorted(self.self_costs, key=lambda c: -c[1])[:3]
            costs = ", ".join(f"{share:.1%} of pid {pid}'s time" for pid, share in worst)
            budget = f"budget {self.budget:.0%}" if self.budget else "no budget: every call probed"
            parts.append(f"gpuscope: {costs} ({budget}, measured)")
        est = [r for r in self.rows if r.estimated]
        if est:
            parts.append(f"≈ {', '.join(r.name for r in est)} probed {min(r.coverage for r in est):.0%} of the time")
        return " · ".join(parts)

    def layers(self) -> tuple[Source, ...]:
        """Layers to show, in screen order (Host last)."""
        return tuple(
            layer
            for layer in Source
            if layer in CORE_LAYERS or self.header.probes(layer) or any(r.layer is layer for r in self.rows)
        )

    def layer(self, layer: Source) -> tuple[OpRow, ...]:
        return tuple(r for r in self.rows if r.layer is layer)

    def layer_events(self, layer: Source) -> int:
        return sum(r.count for r in self.rows if r.layer is layer)

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of one interval (``gpuscope trace --json``)."""
        sys_ = self.system
        return {
            "type": "interval",
            "elapsed_s": round(self.elapsed_s, 3),
            "events": self.events,
            "events_per_s": round(self.events_per_s, 1),
            "dropped": self.dropped,
            "processes": self.processes,
            "window_s": round(self.window_s, 3),
            "system": {
                "cpu_pct": None if sys_.cpu_pct is None else round(sys_.cpu_pct, 1),
                "mem_pct": round(sys_.mem_pct, 1),
                "mem_available_bytes": sys_.mem_available_bytes,
                "load1": sys_.load1,
                "swap_used_bytes": sys_.swap_used_bytes,
            },
            "ops": [
                {
                    "layer": r.layer.value,
                    "op": r.name,
                    "count": r.count,
                    "rate_per_s": round(r.rate_per_s, 1),
                    "window_count": r.window_count,
                    "p50_ns": round(r.p50_ns),
                    "p95_ns": round(r.p95_ns),
                    "p99_ns": round(r.p99_ns),
                    "max_ns": round(r.max_ns),
                    "time_share": None if r.time_share is None else round(r.time_share, 4),
                    "flags": list(r.flags),
                    **({"estimated": True, "seen": r.seen, "coverage": round(r.coverage, 4)} if r.estimated else {}),
                }
                for r in self.rows
            ],
            "findings": list(self.findings),
            "budget": self.budget,
            "self_cost": [{"pid": pid, "share": round(share, 5)} for pid, share in self.self_costs],
        }


class FindingSource(Protocol):
    """Live findings: short lines shown under the tables (the explain rules plug in here)."""

    def findings(self, window: LiveWindow) -> Sequence[str]: ...


# -- the rules of the flag column ----------------------------------------------


def op_flags(
    layer: Source, p50_ns: float, p99_ns: float, share_now: float | None, share_before: float | None
) -> tuple[str, ...]:
    """The flags of one row: a heavy tail, and a jump of the op's time share.

    share_now: share in the last interval; share_before: share over the rest
    of the window (None when there was nothing to compare with).
    """
    flags: list[str] = []
    if layer is not Source.HOST and p50_ns > 0 and p99_ns >= TAIL_RATIO * p50_ns:
        flags.append(FLAG_TAIL)
    if share_now is not None and share_before is not None and share_now - share_before >= SHARE_JUMP - 1e-9:
        flags.append(FLAG_SHARE)
    return tuple(flags)


# -- windowed histograms -------------------------------------------------------


def window_histogram(now: LatencyHistogram, before: LatencyHistogram | None) -> LatencyHistogram:
    """The histogram of the calls between two cumulative copies (``now - before``).

    Min and max of the window are not recoverable exactly by subtraction; they
    are bounded by the lowest and highest non-empty bucket (within one bucket,
    ~4.4 %) and by the cumulative extremes.
    """
    if before is None or before.count == 0:
        return now
    counts = now.counts - before.counts
    count = now.count - before.count
    if count <= 0:
        return LatencyHistogram.empty()
    nz = np.flatnonzero(counts)
    lo, hi = int(nz[0]), int(nz[-1])
    max_ns = min(int(2.0 ** ((hi + 1) / SUB)), now.max_ns)
    min_ns = max(int(2.0 ** (lo / SUB)), now.min_ns)
    return LatencyHistogram(counts, count, now.total_ns - before.total_ns, max(max_ns, min_ns), min_ns)


def _delta_total(now: CollectorSample, before: CollectorSample | None, op: int) -> int:
    h = now.per_op.get(op)
    b = before.per_op.get(op) if before is not None else None
    return (h.total_ns if h else 0) - (b.total_ns if b else 0)


def _shares(now: CollectorSample, before: CollectorSample | None, ops: Sequence[int]) -> dict[int, float] | None:
    totals = {op: _delta_total(now, before, op) for op in ops}
    denom = sum(totals.values())
    if denom <= 0:
        return None
    return {op: t / denom for op, t in totals.items()}


# -- the builder ----------------------------------------------------------------


class SnapshotBuilder:
    """Sample a collector once per interval and post a ``LiveSnapshot``.

    Args:
        source: the collector to sample.
        post: called with each snapshot (on the builder thread when started).
        findings: live finding sources, asked in order.
        system: host CPU/memory sampler (default: /proc).
        clock: monotonic seconds; tests pass a frozen one and call ``build()``.
        interval_s: seconds between snapshots.
        window_intervals: percentiles cover this many intervals (default 10 s).
    """

    def __init__(
        self,
        source: CollectorSource,
        post: Callable[[LiveSnapshot], None],
        *,
        findings: Sequence[FindingSource] = (),
        system: SystemSampler | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = 1.0,
        window_intervals: int = 10,
        started_at: float | None = None,
    ) -> None:
        self.source = source
        self.post = post
        self.finding_sources = tuple(findings)
        self.system = system or SystemSampler()
        self.clock = clock
        self.interval_s = interval_s
        self.started_at = clock() if started_at is None else started_at
        # (time, sample) of the start and of the last window_intervals builds; index 0 is the window base.
        self._history: collections.deque[tuple[float, CollectorSample]] = collections.deque(
            [(self.started_at, CollectorSample({}))], maxlen=window_intervals + 1
        )
        self.system.sample()  # CPU % is a rate: prime it so the first snapshot has one
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one step -----------------------------------------------------------

    def build(self) -> LiveSnapshot:
        """Sample the collector now and return the snapshot (does not post it)."""
        now_t = self.clock()
        sample = self.source.sample()
        prev_t, prev = self._history[-1]
        self._history.append((now_t, sample))
        base_t, base = self._history[0]  # window_intervals builds ago (or the start)
        interval = max(now_t - prev_t, 1e-9)
        window = max(now_t - base_t, 1e-9)
        rows = self._rows(sample, prev, base, interval)
        preemptions = _preemptions(sample, base)
        live = LiveWindow(rows, window, preemptions, max(sample.dropped - prev.dropped, 0))
        found: list[str] = []
        for fs in self.finding_sources:
            found.extend(fs.findings(live))
        return LiveSnapshot(
            header=self.source.header(),
            elapsed_s=now_t - self.started_at,
            events=sample.events,
            events_per_s=max(sample.events - prev.events, 0) / interval,
            dropped=sample.dropped,
            processes=sample.processes,
            system=self.system.sample(),
            window_s=window,
            rows=rows,
            findings=tuple(found),
            budget=sample.budget,
            self_costs=sample.self_costs,
        )

    def _rows(
        self, now: CollectorSample, prev: CollectorSample, base: CollectorSample, interval_s: float
    ) -> tuple[OpRow, ...]:
        rows: list[OpRow] = []
        for layer in Source:
            ops = [op for op, h in now.per_op.items() if source_of(op) is layer and h.count]
            # Stable order: most time since the start first.
            ops.sort(key=lambda op: (-now.per_op[op].total_ns, -now.per_op[op].count, op_name(op)))
            timed = layer is not Source.HOST
            share_win = _shares(now, base, ops) if timed else None
            share_now = _shares(now, prev, ops) if timed else None
            share_before = _shares(prev, base, ops) if timed and prev is not base else None
            for op in ops:
                h = now.per_op[op]
                prev_h = prev.per_op.get(op)
                w = window_histogram(h, base.per_op.get(op))
                p50, p99 = w.percentile(50), w.percentile(99)
                if h.max_ns == 0 or (layer is Source.HOST and op not in TIMED_HOST_OPS):
                    # untimed events (entry-only calls, forks, aggregates): no latency to show
                    w = LatencyHistogram(w.counts, w.count)
                    p50 = p99 = 0.0
                s_now = share_now.get(op) if share_now else None
                s_before = share_before.get(op, 0.0) if share_before else None
                note = ""
                if op == Op.sched_switch and now.preempted:
                    note = f"{now.preempted:,} preempted"
                count, rate = h.count, (h.count - (prev_h.count if prev_h else 0)) / interval_s
                estimated = op in now.sampled_ops and now.covered_ns < now.elapsed_ns
                coverage = now.covered_ns / now.elapsed_ns if now.elapsed_ns else 1.0
                if estimated:
                    # Calls seen in the windows, scaled by the time they covered (the probed calls run a
                    # little slower than the rest: explain corrects for that, the live view does not).
                    count = round(h.count / max(coverage, 1e-6))
                    covered_s = (now.covered_ns - prev.covered_ns) / 1e9
                    seen_now = h.count - (prev_h.count if prev_h else 0)
                    rate = seen_now / covered_s if covered_s > 0 else count / max(now.elapsed_ns / 1e9, 1e-9)
                rows.append(
                    OpRow(
                        op=op,
                        name=op_name(op),
                        layer=layer,
                        count=count,
                        rate_per_s=rate,
                        window_count=w.count,
                        p50_ns=p50,
                        p95_ns=w.percentile(95) if w.max_ns else 0.0,
                        p99_ns=p99,
                        max_ns=float(w.max_ns),
                        time_share=share_win.get(op, 0.0) if share_win else (0.0 if timed else None),
                        flags=op_flags(layer, p50, p99, s_now, s_before) if w.count else (),
                        note=note,
                        estimated=estimated,
                        seen=h.count,
                        coverage=coverage,
                    )
                )
        return tuple(rows)

    # -- the thread -----------------------------------------------------------

    def start(self) -> None:
        """Build and post a snapshot every ``interval_s`` on a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpuscope-snapshots", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (bounded wait); a snapshot being built is finished first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.post(self.build())

    def __enter__(self) -> SnapshotBuilder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _preemptions(now: CollectorSample, base: CollectorSample) -> Preemptions:
    count = now.preempted - base.preempted
    if count <= 0:
        return Preemptions()
    culprits = [(tgid, n - base.preemptors.get(tgid, 0)) for tgid, n in now.preemptors.items()]
    # Few distinct preemptors in practice; keep the top ones.
    top = sorted((c for c in culprits if c[1] > 0), key=lambda c: (-c[1], c[0]))[:5]
    return Preemptions(count, now.preempted_ns - base.preempted_ns, tuple(top))
