"""Estimates for ops probed in windows: coverage arithmetic and the estimator against known loops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from gpuscope.analysis.coverage import BUCKET_NS, Coverage, anchor_counts, with_sampling_caveats
from gpuscope.analysis.engine import analyse
from gpuscope.model.findings import Cause, Finding, Severity, Symptom
from gpuscope.model.ops import Op

from .builder import US, Events

S = 1_000_000_000
MS = 1_000_000


def test_overlapping_and_touching_windows_merge_and_coverage_is_measured_per_second() -> None:
    cov = Coverage.of(
        frozenset({10}), [(0, 100 * MS), (50 * MS, 200 * MS), (200 * MS, 250 * MS), (S + 10 * MS, S + 30 * MS)]
    )
    assert cov.starts.tolist() == [0, S + 10 * MS]
    assert cov.ends.tolist() == [250 * MS, S + 30 * MS]
    assert cov.covered_ns(0, 2 * S) == 270 * MS
    assert cov.covered_ns(100 * MS, S + 20 * MS) == 160 * MS
    assert np.allclose(cov.fractions(np.array([0, S, 2 * S])), [0.25, 0.02, 0.0])


def _steady(rate_per_s: float, seconds: int, window_ms: int, slowdown: float, exact_s: int = 0):
    """Windows of window_ms a second after exact_s probed whole, and the calls a loop at rate_per_s
    (unprobed) makes in them when probing slows it by ``slowdown`` (0.4: 40 % of a window goes to probes)."""
    intervals = [(0, exact_s * S)] if exact_s else []
    speed = {}
    for sec in range(exact_s, seconds):
        start = sec * S + 300 * MS
        intervals.append((start, start + window_ms * MS))
        speed[(7, start)] = 1 - slowdown
    buckets = np.arange(seconds, dtype=np.int64) * S
    counts = np.array(
        [
            rate_per_s * (1 - slowdown) if b < exact_s else rate_per_s * (1 - slowdown) * window_ms / 1000
            for b in range(seconds)
        ]
    )
    return Coverage.of(frozenset({10}), intervals, 0.01, speed), buckets, counts


def test_a_steady_loop_is_estimated_at_its_unprobed_rate_from_short_windows() -> None:
    # given a loop making 50k calls a second unprobed, seen in 20 ms windows where probes slow it by 40 %
    cov, buckets, counts = _steady(50_000, seconds=10, window_ms=20, slowdown=0.4)
    # when its calls over the 10 s are estimated
    est = cov.estimate(7, (0, 10 * S), buckets, counts)
    # then the estimate is the 500k it made, not the 300k a ratio of time alone would say
    assert abs(est - 500_000) < 500_000 * 0.01
    ratio_only = counts.sum() / (cov.covered_ns(0, 10 * S) / (10 * S))
    assert ratio_only < 0.65 * 500_000


def test_seconds_probed_whole_count_what_was_seen() -> None:
    # given 3 s probed whole (the first seconds) where the loop, slowed, made 30k a second, then windows
    cov, buckets, counts = _steady(50_000, seconds=8, window_ms=20, slowdown=0.4, exact_s=3)
    est = cov.estimate(7, (0, 8 * S), buckets, counts)
    # then those seconds count as seen (3 x 30k) and the rest at the unprobed rate (5 x 50k, less the windows' time)
    expected = 3 * 30_000 + 5 * (30_000 * 0.02 + 50_000 * 0.98)
    assert abs(est - expected) < expected * 0.01


def test_a_second_no_window_covered_takes_the_rate_of_its_neighbours() -> None:
    # given windows every second but the fifth
    cov, buckets, counts = _steady(10_000, seconds=8, window_ms=50, slowdown=0.0)
    keep = [i for i in range(len(cov.starts)) if not (4 * S <= cov.starts[i] < 5 * S)]
    cov = Coverage.of(cov.sampled_ops, [(int(cov.starts[i]), int(cov.ends[i])) for i in keep], 0.01)
    counts = counts.copy()
    counts[4] = 0
    # then that second is estimated from its neighbours, and the total is right
    est = cov.estimate(7, (0, 8 * S), buckets, counts)
    assert abs(est - 80_000) < 80_000 * 0.01


def test_a_process_active_for_part_of_a_second_is_estimated_for_that_part_only() -> None:
    cov = Coverage.of(frozenset({10}), [(S + 300 * MS, S + 400 * MS)], 0.01)
    # 1,000 calls seen in 100 ms of a process alive from 1.0 s to 1.5 s
    est = cov.estimate(7, (S, S + 500 * MS), np.array([S]), np.array([1_000]))
    assert abs(est - 5_000) < 1


def test_a_span_no_window_touched_is_not_extrapolated() -> None:
    cov = Coverage.of(frozenset({10}), [(10 * S, 11 * S)], 0.01)
    assert cov.estimate(7, (0, 2 * S), np.array([0]), np.array([0])) == 0.0
    assert BUCKET_NS == S


def _busy_loop_seen_in_windows() -> tuple[Events, Coverage]:
    """A busy loop (80 launches 100 µs apart, then a 2 ms sync: 10 ms a step) whose launches were probed
    20 ms a second."""
    ev = Events()
    windows = [(sec * S + 500 * MS, sec * S + 520 * MS) for sec in range(5)]
    for step in range(500):
        base = step * 10 * MS
        for k in range(80):
            t = base + k * 100 * US
            if any(s <= t < e for s, e in windows):
                ev.add(Op.cudaLaunchKernel, t, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 8 * MS, 2 * MS)
    return ev, Coverage.of(frozenset({int(Op.cudaLaunchKernel)}), windows, 0.01)


def test_gaps_the_windows_did_not_cover_are_not_taken_for_gpu_idle_time() -> None:
    # given a loop that launches all the time, its launches seen only inside the probe windows
    ev, cov = _busy_loop_seen_in_windows()
    frame, window = ev.frame()
    # when it is analysed knowing the windows, there is no starvation; not knowing them, sync to sync
    # would look like 10 ms of idle GPU every step
    kinds = [f.kind for f in analyse(frame, window, coverage=cov).findings]
    assert "data-starvation" not in kinds and "throughput-drop" not in kinds
    assert "data-starvation" in [f.kind for f in analyse(frame, window).findings]


def test_a_finding_on_a_sampled_op_says_what_the_windows_could_not_see() -> None:
    finding = Finding(
        rule="cpu-preemption",
        kind="cpu-preemption",
        severity=Severity.HIGH,
        symptom=Symptom("x", op="cudaLaunchKernel", pid=100),
        causes=(Cause("cpu-preemption", ("cudaLaunchKernel: calls overlapping CPU preemption",)),),
        fix="f",
    )
    other = replace(finding, symptom=Symptom("y", op="cudaStreamSynchronize"), causes=())
    cov = Coverage.of(frozenset({int(Op.cudaLaunchKernel)}), [(0, S)], 0.01)
    out = with_sampling_caveats((finding, other), cov, 0, 10 * S)
    assert [c.kind for c in out[0].caveats] == ["estimated"]
    assert "cudaLaunchKernel probed 10.0% of the window (overhead budget)" in out[0].caveats[0].text
    assert out[1].caveats == ()


def test_with_enough_syncs_inside_the_windows_the_count_follows_the_launches_per_sync() -> None:
    # given 12,000 launches seen while 150 of the process's 1,000 syncs fell inside the windows
    cov = Coverage.of(frozenset({10}), [(0, S)], 0.01)
    est = cov.estimate(7, (0, 10 * S), np.array([0]), np.array([12_000]), anchors=(1_000, 150))
    # then its calls are the launches per sync seen, times every sync: whatever the probes' slowdown
    assert est == 80_000
    # and with too few syncs inside, or all of them, the ratio is not used
    assert cov.estimate(7, (0, S), np.array([0]), np.array([500]), anchors=(500, 500)) == 500
    few = cov.estimate(7, (0, 10 * S), np.array([0]), np.array([12_000]), anchors=(1_000, 10))
    assert few != 12_000 * 100


def test_anchor_calls_are_counted_inside_the_windows_by_instant() -> None:
    cov = Coverage.of(frozenset({10}), [(100, 200)], 0.01)
    pids = np.array([1, 1, 1, 2])
    ops = np.array([int(Op.cudaStreamSynchronize), int(Op.cudaStreamSynchronize), int(Op.cudaMalloc), 12])
    ts = np.array([150, 250, 199, 150])
    assert anchor_counts(pids, ops, ts, cov) == {1: (3, 2), 2: (1, 1)}
    assert anchor_counts(pids, ops, ts, cov, {1: 10}) == {1: (10, 2), 2: (1, 1)}


def test_a_session_whose_calibration_failed_says_its_cost_was_not_measured(tmp_path: Path) -> None:
    from gpuscope.analysis.engine import ExplainOptions, explain_db
    from gpuscope.render.explain import render_report
    from gpuscope.store.connect import connect_writer
    from gpuscope.store.sessions_write import set_session_flag

    ev = Events()
    ev.loop(Op.cudaLaunchKernel, 50, 1_000_000, 5 * US)
    db = ev.to_db(tmp_path / "t.db")
    conn = connect_writer(db)
    set_session_flag(conn, 1, "self_cost_error", "the probe cost could not be calibrated: no library")
    conn.commit()
    conn.close()
    report = explain_db(db, ExplainOptions())
    assert report.sampling is not None
    assert report.sampling.unmeasured == ("the probe cost could not be calibrated: no library",)
    assert "gpuscope's own cost: not measured (the probe cost could not be calibrated: no library)" in render_report(
        report
    )


def test_a_starved_gpu_seen_in_probe_windows_draws_its_idle_share_as_a_lower_bound() -> None:
    # given a loop that launches, syncs, then leaves its GPU idle 8 ms a step, its launches probed in windows
    # that cover its first 3 of 5 seconds
    ev = Events()
    windows = [(0, 3 * S)]
    for step in range(500):
        base = step * 10 * MS
        if base < 3 * S:
            ev.add(Op.cudaLaunchKernel, base, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 10 * US, 2 * MS)
    frame, window = ev.frame()
    cov = Coverage.of(frozenset({int(Op.cudaLaunchKernel)}), windows, 0.01)
    # when it is analysed knowing the windows
    found = [f for f in analyse(frame, window, coverage=cov).findings if f.kind == "data-starvation"]
    # then its chart says the idle share is a lower bound (gaps outside the windows are not known), and
    # without the windows it is the plain share
    assert found and found[0].causes[0].series is not None
    assert found[0].causes[0].series.label == "GPU idle, at least"
    plain = next(f for f in analyse(frame, window).findings if f.kind == "data-starvation")
    assert plain.causes[0].series is not None and plain.causes[0].series.label == "GPU idle"
