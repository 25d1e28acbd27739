"""Interval overlap and statistics against brute force."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.intervals import merge, overlap_ns
from gpuscope.analysis.stats import effect_size, measurable, pct, severity_for
from gpuscope.model.findings import Effect, Severity
from gpuscope.model.ops import Op
from tests.unit.analysis.builder import Events


def test_overlap_matches_brute_force_on_random_intervals() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 10_000, 300)
    e = s + rng.integers(1, 200, 300)
    ms, me = merge(s, e)
    qs = rng.integers(0, 10_000, 500)
    qe = qs + rng.integers(0, 500, 500)
    covered = np.zeros(11_000, dtype=bool)
    for a, b in zip(s, e, strict=True):
        covered[a:b] = True
    expect = [int(covered[a:b].sum()) for a, b in zip(qs, qe, strict=True)]
    assert overlap_ns(qs, qe, ms, me).tolist() == expect


def test_percentile_is_exact_nearest_rank() -> None:
    v = np.arange(1, 101)
    assert (pct(v, 50), pct(v, 99), pct(v, 100)) == (50, 99, 100)


def test_effect_compares_affected_with_unaffected_calls() -> None:
    dur = np.array([100_000] * 90 + [1_000_000] * 10)
    affected = dur > 500_000
    e = effect_size(dur, affected, np.where(affected, 900_000, 0))
    assert (e.affected_p50_ns, e.unaffected_p50_ns, e.p50_ratio) == (1_000_000, 100_000, 10.0)
    assert e.slowest_overlapped == e.slowest_n == 10
    assert e.excess_share == 1.0
    assert not e.floored and e.slowdown() == "10.0× slower"


def test_a_slowdown_over_a_near_zero_baseline_is_an_excess_not_a_factor() -> None:
    # given 1 µs calls when unaffected and 1.4 ms when affected (a factor of 1400 that says nothing)
    dur = np.array([1_000] * 90 + [1_400_000] * 10)
    affected = dur > 500_000
    e = effect_size(dur, affected, np.where(affected, 1_399_000, 0))
    # then the factor is against the 10 µs floor and the words give the excess
    assert e.p50_ratio == 140.0
    assert e.floored and e.slowdown() == "+1.4 ms (p50) slower"


def _effect(ratio: float, excess: float, slowest: int = 0, affected: int = 10) -> Effect:
    return Effect(affected, 90, 100, 100, ratio, 10, slowest, excess, 0)


def test_measurable_effect_boundaries() -> None:
    assert measurable(_effect(1.5, 0.2))
    assert not measurable(_effect(1.49, 0.9))
    assert not measurable(_effect(5.0, 0.19))
    assert measurable(_effect(5.0, 0.1, slowest=5))
    assert not measurable(_effect(5.0, 0.9, affected=2))


def test_severity_rubric_boundaries() -> None:
    assert severity_for(50, 100) is Severity.CRITICAL
    assert severity_for(49, 100) is Severity.HIGH
    assert severity_for(20, 100) is Severity.HIGH
    assert severity_for(19, 100) is Severity.MEDIUM
    assert severity_for(5, 100, slowdown=10) is Severity.HIGH
    assert severity_for(4, 100) is Severity.LOW
    assert severity_for(1, 100, slowdown=3) is Severity.MEDIUM


def test_time_shares_of_several_processes_are_shares_of_their_time_not_of_the_window() -> None:
    # given two processes, each waiting 9 ms of every 10 ms for a second, at the same time
    ev = Events()
    for pid in (100, 200):
        for i in range(100):
            ev.add(Op.cudaLaunchKernel, i * 10_000_000, 5_000, pid)
            ev.add(Op.cudaStreamSynchronize, i * 10_000_000 + 10_000, 9_000_000, pid)
    report = ev.report()
    sync = next(s for s in report.stats if s.op == "cudaStreamSynchronize")
    # then the share is 90% of the time there was (not 180% of the window), and so per process
    assert 0.89 < sync.time_share < 0.91
    assert all(0.89 < s.time_share < 0.91 for s in report.per_process if s.op == "cudaStreamSynchronize")
    assert sum(s.time_share for s in report.stats) <= 1.0
