"""Streaming histograms give percentiles within a bucket of the exact value."""

from __future__ import annotations

import numpy as np

from gpuscope.model.latency import LatencyHistogram


def test_percentiles_are_within_five_percent_of_exact() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(mean=10, sigma=1.5, size=50_000).astype(np.uint64) + 1
    h = LatencyHistogram.empty()
    for chunk in np.array_split(values, 17):
        h.add(chunk)
    assert h.count == len(values)
    assert h.max_ns == int(values.max())
    for p in (50, 95, 99):
        exact = float(np.percentile(values, p, method="inverted_cdf"))
        assert abs(h.percentile(p) - exact) / exact < 0.05, p


def test_merge_equals_one_histogram_of_all_values() -> None:
    a, b = LatencyHistogram.empty(), LatencyHistogram.empty()
    a.add(np.array([10, 20, 30], dtype=np.uint64))
    b.add(np.array([1000, 5], dtype=np.uint64))
    a.merge(b)
    assert (a.count, a.total_ns, a.max_ns, a.min_ns) == (5, 1065, 1000, 5)


def test_empty_histogram_reports_zero() -> None:
    assert LatencyHistogram.empty().percentile(99) == 0.0
