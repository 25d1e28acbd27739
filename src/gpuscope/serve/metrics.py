"""Prometheus metrics of a running trace, served by ``prometheus_client`` on ``/metrics``.

Read at each scrape from the session's live statistics (every event the
tracer decoded, stored or not: the same exact counts as the recording's
aggregates) and the tracer's kernel counters; nothing is computed per event
for the exporter. Labels are bounded: node, source, op (a fixed set), drop
reason, finding kind and severity; no pid or container label.

Histogram buckets are powers of two of nanoseconds (1.024 µs … 68.7 s): the
live histograms' buckets are 1/16 of an octave, so these bounds fall on their
edges and the cumulative counts are exact, not interpolated.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from gpuscope.agent.live_stats import LiveStats
from gpuscope.model.drops import DROP_SOURCES
from gpuscope.model.latency import SUB
from gpuscope.model.ops import Source, op_name, source_of

BUCKET_POWERS = range(10, 37)  # 2**10 ns (1.024 µs) .. 2**36 ns (68.7 s)


class TraceCollector:
    """A ``prometheus_client`` collector over a trace session (registered on a registry of its own)."""

    def __init__(
        self,
        node: str,
        stats: Callable[[], LiveStats],
        counters: Callable[[], dict[str, int]],
        findings: Callable[[], dict[tuple[str, str], int]] = dict,
    ) -> None:
        self.node = node
        self.stats = stats
        self.counters = counters
        self.findings = findings
        self._last: tuple[float, int] | None = None

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only: no work at registration

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        calls = CounterMetricFamily(
            "gpuscope_calls", "CUDA, driver and NCCL calls traced", labels=["node", "source", "op"]
        )
        durations = HistogramMetricFamily(
            "gpuscope_call_duration_seconds", "time inside each call", labels=["node", "source", "op"]
        )
        host = CounterMetricFamily("gpuscope_host_events", "host events of traced processes", labels=["node", "event"])
        for op, hist in sorted(stats.per_op.items()):
            source, name = source_of(op), op_name(op)
            if source is Source.HOST:
                host.add_metric([self.node, name], hist.count)
                continue
            labels = [self.node, source.value, name]
            calls.add_metric(labels, hist.count)
            cumulative = hist.counts.cumsum()
            buckets: list[tuple[str, float]] = [
                (repr(2.0**k / 1e9), float(cumulative[SUB * k - 1])) for k in BUCKET_POWERS
            ]
            buckets.append(("+Inf", float(hist.count)))
            durations.add_metric(labels, buckets, sum_value=hist.total_ns / 1e9)
        yield calls
        yield durations
        yield host
        preempted = CounterMetricFamily(
            "gpuscope_preemptions", "times a traced thread was preempted while runnable", labels=["node"]
        )
        preempted.add_metric([self.node], stats.preempted)
        yield preempted
        counters = self.counters()
        dropped = CounterMetricFamily(
            "gpuscope_events_dropped", "events lost in the kernel's ring, by what they were", labels=["node", "reason"]
        )
        for key, what in DROP_SOURCES.items():
            dropped.add_metric([self.node, what], counters.get(key, 0))
        yield dropped
        found = GaugeMetricFamily("gpuscope_findings", "live explain findings", labels=["node", "kind", "severity"])
        for (kind, severity), n in sorted(self.findings().items()):
            found.add_metric([self.node, kind, severity], n)
        yield found
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = CounterMetricFamily("gpuscope_agent_cpu_seconds", "CPU time of the tracer itself", labels=["node"])
        cpu.add_metric([self.node], usage.ru_utime + usage.ru_stime)
        yield cpu
        now = time.monotonic()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (stats.events - self._last[1]) / (now - self._last[0])
        self._last = (now, stats.events)
        eps = GaugeMetricFamily(
            "gpuscope_agent_events_per_second", "events decoded since the last scrape, per second", labels=["node"]
        )
        eps.add_metric([self.node], rate)
        yield eps


def serve_metrics(collector: TraceCollector, host: str, port: int) -> tuple[Any, Any]:
    """Start ``/metrics`` on ``host:port`` in a thread; returns (server, thread) for shutdown."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return start_http_server(port, addr=host, registry=registry)
