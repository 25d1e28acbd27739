"""The Prometheus collector: exact counts and cumulative buckets from the live histograms, bounded labels."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from gpuscope.agent.live_stats import LiveStats
from gpuscope.exporters.metrics import TraceCollector, TraceMetrics
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op


def _scrape(stats: LiveStats, findings: dict[tuple[str, str], int] | None = None) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        TraceCollector(TraceMetrics("gpu-1", lambda: stats, lambda: {"drop_cuda": 7}, lambda: findings or {}))
    )
    return generate_latest(registry).decode()


def test_buckets_are_exact_at_powers_of_two_and_counts_match() -> None:
    hist = LatencyHistogram.empty()
    # 3 calls under 1.024 µs, 2 between 1.024 and 2.048 µs, 1 of a second
    hist.add(np.array([100, 500, 1000, 1100, 2000, 1_000_000_000], dtype=np.int64))
    stats = LiveStats(per_op={int(Op.cudaMalloc): hist}, events=6)
    text = _scrape(stats)
    assert 'gpuscope_calls_total{node="gpu-1",op="cudaMalloc",source="cuda"} 6.0' in text
    assert (
        'gpuscope_call_duration_seconds_bucket{le="1.024e-06",node="gpu-1",op="cudaMalloc",source="cuda"} 3.0' in text
    )
    assert (
        'gpuscope_call_duration_seconds_bucket{le="2.048e-06",node="gpu-1",op="cudaMalloc",source="cuda"} 5.0' in text
    )
    assert 'gpuscope_call_duration_seconds_bucket{le="+Inf",node="gpu-1",op="cudaMalloc",source="cuda"} 6.0' in text
    assert 'gpuscope_events_dropped_total{node="gpu-1",reason="cuda"} 7.0' in text


def test_host_events_findings_and_no_unbounded_labels() -> None:
    hist = LatencyHistogram.empty()
    hist.add(np.array([5_000, 6_000], dtype=np.int64))
    stats = LiveStats(per_op={int(Op.sched_switch): hist}, events=2, preempted=1)
    text = _scrape(stats, {("cpu-preemption", "HIGH"): 1})
    assert 'gpuscope_host_events_total{event="sched_switch",node="gpu-1"} 2.0' in text
    assert 'gpuscope_preemptions_total{node="gpu-1"} 1.0' in text
    assert 'gpuscope_findings{kind="cpu-preemption",node="gpu-1",severity="HIGH"} 1.0' in text
    assert "pid=" not in text and "container" not in text


def test_the_overhead_budget_is_exported_with_estimates_beside_the_calls_seen() -> None:
    # given launches seen in windows that covered a quarter of the time, and two processes' measured costs
    hist = LatencyHistogram.empty()
    hist.add(np.full(250, 1_000, dtype=np.int64))
    stats = LiveStats(per_op={int(Op.cudaLaunchKernel): hist}, events=250)

    def sampling() -> tuple[frozenset[str], int, int, float | None, tuple[tuple[int, float], ...]]:
        return frozenset({"cudaLaunchKernel"}), 250_000_000, 1_000_000_000, 0.01, ((42, 0.007), (43, 0.002))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TraceCollector(TraceMetrics("gpu-1", lambda: stats, dict, dict, sampling=sampling)))
    text = generate_latest(registry).decode()
    # then gpuscope_calls counts what was seen, and the estimate and the coverage stand beside it
    assert 'gpuscope_calls_total{node="gpu-1",op="cudaLaunchKernel",source="cuda"} 250.0' in text
    assert 'gpuscope_calls_estimated{node="gpu-1",op="cudaLaunchKernel",source="cuda"} 1000.0' in text
    assert 'gpuscope_probe_coverage_ratio{node="gpu-1"} 0.25' in text
    assert 'gpuscope_overhead_budget_ratio{node="gpu-1"} 0.01' in text
    # and the measured self-cost per process, and of the costliest
    assert 'gpuscope_self_cost_ratio{node="gpu-1",pid="42"} 0.007' in text
    assert 'gpuscope_self_cost_max_ratio{node="gpu-1"} 0.007' in text


def test_without_a_budget_nothing_is_marked_estimated() -> None:
    hist = LatencyHistogram.empty()
    hist.add(np.full(10, 1_000, dtype=np.int64))
    stats = LiveStats(per_op={int(Op.cudaLaunchKernel): hist}, events=10)

    def sampling() -> tuple[frozenset[str], int, int, float | None, tuple[tuple[int, float], ...]]:
        return frozenset(), 0, 1_000_000_000, None, ((42, 0.2),)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TraceCollector(TraceMetrics("gpu-1", lambda: stats, dict, dict, sampling=sampling)))
    text = generate_latest(registry).decode()
    assert "gpuscope_calls_estimated{" not in text and "gpuscope_probe_coverage_ratio{" not in text
    assert 'gpuscope_self_cost_ratio{node="gpu-1",pid="42"} 0.2' in text
