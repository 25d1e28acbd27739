"""Metrics of a running trace: one snapshot read for every exporter, and the Prometheus rendering of it.

``TraceMetrics.snapshot()`` reads the session's live statistics (every event
the tracer decoded, stored or not: the same exact counts as the recording's
aggregates), the tracer's kernel counters and the live findings, at scrape
or push time; nothing is computed per event for an exporter. The Prometheus
collector here and the OpenTelemetry push (``serve.otlp``) both render that
one snapshot, so their names, labels and numbers agree. Labels are bounded:
node, source, op (a fixed set), drop reason, finding kind and severity; no
pid or container label.

Histogram buckets are powers of two of nanoseconds (1.024 µs … 68.7 s): the
live histograms' buckets are 1/16 of an octave, so these bounds fall on their
edges and the cumulative counts are exact, not interpolated.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from gpuscope.agent.live_stats import LiveStats
from gpuscope.model.drops import DROP_SOURCES
from gpuscope.model.latency import SUB
from gpuscope.model.ops import Source, op_name, source_of

BUCKET_POWERS = range(10, 37)  # 2**10 ns (1.024 µs) .. 2**36 ns (68.7 s)
BUCKET_BOUNDS_S = tuple(2.0**k / 1e9 for k in BUCKET_POWERS)


@dataclass(frozen=True, slots=True)
class CallSeries:
    """One op's calls: the exact count, total and extremes, and the count at or under each bound."""

    source: str
    op: str
    count: int
    sum_s: float
    min_s: float
    max_s: float
    cumulative: tuple[int, ...]  # calls at or under each of BUCKET_BOUNDS_S


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything an exporter shows, read at one moment (``taken_ns``: monotonic clock)."""

    node: str
    calls: tuple[CallSeries, ...]
    host_events: tuple[tuple[str, int], ...]  # (event, count)
    preempted: int
    dropped: tuple[tuple[str, int], ...]  # (reason, records lost), every reason present
    findings: tuple[tuple[str, str, int], ...]  # (kind, severity, how many)
    agent_cpu_s: float
    events: int  # decoded since the start, every kind
    taken_ns: int
    sampling: SamplingState = field(default_factory=lambda: SamplingState())


@dataclass(frozen=True, slots=True)
class SamplingState:
    """The overhead budget at one moment: which ops were probed in windows and for how much of the time,
    their estimated counts, and gpuscope's measured cost to each process."""

    budget: float | None = None
    coverage: float | None = None  # the share of the time the sampled ops were probed; None: all the time
    estimated: tuple[tuple[str, str, int], ...] = ()  # (source, op, estimated calls) of the sampled ops
    self_costs: tuple[tuple[int, float], ...] = ()  # (pid, share of its CPU time), measured


class TraceMetrics:
    """Where a trace's metrics are read from; safe from any thread (each source guards its own state).

    Args:
        node: the node label of every series.
        stats: a consistent copy of the live statistics (``LiveStats.copy``).
        counters: the tracer's kernel counters, drops included (``Tracer.counters``).
        findings: the live findings by (kind, severity).
    """

    def __init__(
        self,
        node: str,
        stats: Callable[[], LiveStats],
        counters: Callable[[], dict[str, int]],
        findings: Callable[[], dict[tuple[str, str], int]] = dict,
        sampling: Callable[[], SamplingInputs] | None = None,
    ) -> None:
        self.node = node
        self.stats = stats
        self.counters = counters
        self.findings = findings
        self.sampling = sampling

    def snapshot(self) -> MetricsSnapshot:
        """Read every source now."""
        stats = self.stats()
        calls: list[CallSeries] = []
        host: list[tuple[str, int]] = []
        for op, hist in sorted(stats.per_op.items()):
            source, name = source_of(op), op_name(op)
            if source is Source.HOST:
                host.append((name, hist.count))
                continue
            cumulative = hist.counts.cumsum()
            calls.append(
                CallSeries(
                    source.value,
                    name,
                    hist.count,
                    hist.total_ns / 1e9,
                    hist.min_ns / 1e9,
                    hist.max_ns / 1e9,
                    tuple(int(cumulative[SUB * k - 1]) for k in BUCKET_POWERS),
                )
            )
        counters = self.counters()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sampling = SamplingState()
        if self.sampling is not None:
            sampled_ops, covered_ns, elapsed_ns, budget, self_costs = self.sampling()
            coverage = covered_ns / elapsed_ns if sampled_ops and elapsed_ns > 0 else None
            estimated = tuple(
                (c.source, c.op, round(c.count / max(coverage, 1e-6)))
                for c in calls
                if coverage is not None and c.op in sampled_ops
            )
            sampling = SamplingState(budget, coverage, estimated, self_costs)
        return MetricsSnapshot(
            node=self.node,
            calls=tuple(calls),
            host_events=tuple(host),
            preempted=stats.preempted,
            dropped=tuple((what, counters.get(key, 0)) for key, what in DROP_SOURCES.items()),
            findings=tuple((kind, severity, n) for (kind, severity), n in sorted(self.findings().items())),
            agent_cpu_s=usage.ru_utime + usage.ru_stime,
            events=stats.events,
            taken_ns=time.monotonic_ns(),
            sampling=sampling,
        )


class EventRate:
    """Events decoded per second between one reader's successive snapshots.

    Each exporter keeps its own: a scrape and a push in between must not
    shorten each other's interval.
    """

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None

    def update(self, snap: MetricsSnapshot) -> float:
        """The rate since the previous call (0.0 at the first)."""
        rate = 0.0
        if self._last is not None and snap.taken_ns > self._last[0]:
            rate = (snap.events - self._last[1]) * 1e9 / (snap.taken_ns - self._last[0])
        self._last = (snap.taken_ns, snap.events)
        return rate


class TraceCollector:
    """A ``prometheus_client`` collector over a trace session (registered on a registry of its own)."""

    def __init__(self, source: TraceMetrics) -> None:
        self.source = source
        self._rate = EventRate()

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only: no work at registration

    def collect(self) -> Iterator[Metric]:
        snap = self.source.snapshot()
        node = snap.node
        calls = CounterMetricFamily(
            "gpuscope_calls", "CUDA, driver and NCCL calls traced", labels=["node", "source", "op"]
        )
        durations = HistogramMetricFamily(
            "gpuscope_call_duration_seconds", "time inside each call", labels=["node", "source", "op"]
        )
        for series in snap.calls:
            labels = [node, series.source, series.op]
            calls.add_metric(labels, series.count)
            buckets = [(repr(bound), float(n)) for bound, n in zip(BUCKET_BOUNDS_S, series.cumulative, strict=True)]
            buckets.append(("+Inf", float(series.count)))
            durations.add_metric(labels, buckets, sum_value=series.sum_s)
        yield calls
        yield durations
        host = CounterMetricFamily("gpuscope_host_events", "host events of traced processes", labels=["node", "event"])
        for event, n in snap.host_events:
            host.add_metric([node, event], n)
        yield host
        preempted = CounterMetricFamily(
            "gpuscope_preemptions", "times a traced thread was preempted while runnable", labels=["node"]
        )
        preempted.add_metric([node], snap.preempted)
        yield preempted
        dropped = CounterMetricFamily(
            "gpuscope_events_dropped", "events lost in the kernel's ring, by what they were", labels=["node", "reason"]
        )
        for reason, n in snap.dropped:
            dropped.add_metric([node, reason], n)
        yield dropped
        found = GaugeMetricFamily("gpuscope_findings", "live explain findings", labels=["node", "kind", "severity"])
        for kind, severity, n in snap.findings:
            found.add_metric([node, kind, severity], n)
        yield found
        cpu = CounterMetricFamily("gpuscope_agent_cpu_seconds", "CPU time of the tracer itself", labels=["node"])
        cpu.add_metric([node], snap.agent_cpu_s)
        yield cpu
        eps = GaugeMetricFamily(
            "gpuscope_agent_events_per_second", "events decoded since the last scrape, per second", labels=["node"]
        )
        eps.add_metric([node], self._rate.update(snap))
        yield eps
        yield from _sampling_families(snap)


# Processes get a series of their own only for the costliest few: pids come and go, and a label per pid
# of every process ever traced would grow without bound.
MAX_COST_SERIES = 8

SamplingInputs = tuple[frozenset[str], int, int, float | None, tuple[tuple[int, float], ...]]
"""(sampled op names, ns they were probed, ns since the start, budget, (pid, self-cost share) pairs)."""


def _sampling_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    """The overhead budget's series: what gpuscope costs each process, and what is estimated."""
    node, s = snap.node, snap.sampling
    if s.self_costs:
        cost = GaugeMetricFamily(
            "gpuscope_self_cost_ratio",
            "gpuscope's measured cost to a traced process: its probe time over its CPU time (recent seconds); "
            f"the {MAX_COST_SERIES} costliest processes",
            labels=["node", "pid"],
        )
        for pid, share in sorted(s.self_costs, key=lambda c: -c[1])[:MAX_COST_SERIES]:
            cost.add_metric([node, str(pid)], share)
        yield cost
        worst = GaugeMetricFamily(
            "gpuscope_self_cost_max_ratio", "gpuscope's measured cost to the process it costs most", labels=["node"]
        )
        worst.add_metric([node], max(share for _, share in s.self_costs))
        yield worst
    if s.budget is not None:
        budget = GaugeMetricFamily(
            "gpuscope_overhead_budget_ratio", "the share of a process's CPU time gpuscope may take", labels=["node"]
        )
        budget.add_metric([node], s.budget)
        yield budget
    if s.coverage is not None:
        coverage = GaugeMetricFamily(
            "gpuscope_probe_coverage_ratio",
            "the share of the time the sampled ops (launches, memsets, async copies) were probed; "
            "their gpuscope_calls count only the calls seen then",
            labels=["node"],
        )
        coverage.add_metric([node], s.coverage)
        yield coverage
        est = GaugeMetricFamily(
            "gpuscope_calls_estimated",
            "an estimate of all the calls of an op probed in windows, from the calls seen and the time covered",
            labels=["node", "source", "op"],
        )
        for source, op, n in s.estimated:
            est.add_metric([node, source, op], n)
        yield est
