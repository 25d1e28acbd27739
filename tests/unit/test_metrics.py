"""The Prometheus collector: exact counts and cumulative buckets from the live histograms, bounded labels."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from gpuscope.agent.live_stats import LiveStats
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.serve.metrics import TraceCollector, TraceMetrics


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
