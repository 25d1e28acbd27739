"""The snapshot builder: windowed rates and percentiles by histogram subtraction, flags, findings."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest

from gpuscope.agent.live_stats import LiveStats
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op, Source
from gpuscope.tui.live_findings import DropFindings, TailLatencyFindings
from gpuscope.tui.live_snapshot import (
    FLAG_SHARE,
    FLAG_TAIL,
    LiveSnapshot,
    OpRow,
    SnapshotBuilder,
    op_flags,
    window_histogram,
)
from tests.unit.tui.fakes import FakeCollector, FixedSystem, FrozenClock, histogram


def builder(collector: FakeCollector, clock: FrozenClock, **kw: object) -> SnapshotBuilder:
    return SnapshotBuilder(
        collector,
        lambda snap: None,
        system=FixedSystem(),
        clock=clock,
        **kw,  # type: ignore[arg-type]
    )


def row(snap: LiveSnapshot, op: Op) -> OpRow:
    (r,) = [r for r in snap.rows if r.op == op]
    return r


# -- windowed histograms --------------------------------------------------------


def test_window_histogram_equals_a_histogram_of_only_the_window_calls() -> None:
    rng = np.random.default_rng(3)
    before_vals = rng.lognormal(12, 1.0, 5_000).astype(np.uint64) + 1
    window_vals = rng.lognormal(9, 0.5, 3_000).astype(np.uint64) + 1
    before = histogram(before_vals.tolist())
    now = before.copy()
    now.add(window_vals)

    w = window_histogram(now, before)
    direct = histogram(window_vals.tolist())

    assert w.count == direct.count == 3_000
    assert w.total_ns == direct.total_ns
    assert np.array_equal(w.counts, direct.counts)
    for p in (50, 95, 99):
        exact = float(np.percentile(window_vals, p, method="inverted_cdf"))
        assert abs(w.percentile(p) - exact) / exact < 0.05, p
    # the window's max is bounded by its highest bucket, not the cumulative max
    assert direct.max_ns <= w.max_ns <= direct.max_ns * 2 ** (1 / 16) + 1
    assert w.max_ns < before.max_ns


def test_window_histogram_of_an_idle_window_is_empty() -> None:
    h = histogram([100, 200])
    w = window_histogram(h, h.copy())
    assert (w.count, w.percentile(99), w.max_ns) == (0, 0.0, 0)


def test_window_histogram_without_a_base_is_the_whole_histogram() -> None:
    h = histogram([100, 200])
    assert window_histogram(h, None) is h


# -- rates and percentiles over intervals ----------------------------------------


def test_rate_is_calls_in_the_last_interval_divided_by_its_length() -> None:
    # given 100 calls in the first second and 600 in the next two seconds
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock)
    collector.add(Op.cudaLaunchKernel, [5_000] * 100)
    clock.advance(1.0)
    first = b.build()
    collector.add(Op.cudaLaunchKernel, [5_000] * 600)
    clock.advance(2.0)
    # when
    second = b.build()
    # then
    assert row(first, Op.cudaLaunchKernel).rate_per_s == pytest.approx(100.0)
    assert row(second, Op.cudaLaunchKernel).rate_per_s == pytest.approx(300.0)
    assert row(second, Op.cudaLaunchKernel).count == 700
    assert second.events == 700
    assert second.events_per_s == pytest.approx(300.0)
    assert second.elapsed_s == pytest.approx(3.0)


def test_percentiles_cover_the_window_and_forget_calls_older_than_it() -> None:
    # given a 3-interval window and a burst of slow calls in the first second
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock, window_intervals=3)
    collector.add(Op.cudaMalloc, [50_000_000] * 100)
    clock.advance(1.0)
    slow = row(b.build(), Op.cudaMalloc)
    # when three more seconds of fast calls follow
    for _ in range(3):
        collector.add(Op.cudaMalloc, [100_000] * 100)
        clock.advance(1.0)
        last = b.build()
    fast = row(last, Op.cudaMalloc)
    # then the slow burst has left the window but not the count
    assert slow.p50_ns == pytest.approx(50_000_000, rel=0.05)
    assert fast.count == 400
    assert fast.window_count == 300
    assert fast.p99_ns == pytest.approx(100_000, rel=0.05)
    assert fast.max_ns == pytest.approx(100_000, rel=0.05)
    assert last.window_s == pytest.approx(3.0)


def test_an_op_idle_in_the_window_keeps_its_count_and_has_no_percentiles() -> None:
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock, window_intervals=1)
    collector.add(Op.cudaFree, [1_000] * 10)
    clock.advance(1.0)
    b.build()
    clock.advance(1.0)
    r = row(b.build(), Op.cudaFree)
    assert (r.count, r.window_count, r.rate_per_s, r.p99_ns, r.flags) == (10, 0, 0.0, 0.0, ())


def test_rows_are_grouped_by_layer_most_time_first_and_host_events_have_no_share() -> None:
    collector, clock = FakeCollector(), FrozenClock()
    collector.add(Op.cudaLaunchKernel, [5_000] * 1_000)  # 5 ms in all
    collector.add(Op.cudaMemcpy, [1_000_000] * 10)  # 10 ms in all
    collector.add(Op.cuLaunchKernel, [4_000] * 1_000)
    collector.add(Op.process_fork, [0, 0])
    clock.advance(1.0)
    snap = builder(collector, clock).build()
    assert [r.name for r in snap.layer(Source.CUDA)] == ["cudaMemcpy", "cudaLaunchKernel"]
    assert row(snap, Op.cudaMemcpy).time_share == pytest.approx(10 / 15)
    assert row(snap, Op.cuLaunchKernel).time_share == pytest.approx(1.0)
    fork = row(snap, Op.process_fork)
    assert (fork.time_share, fork.p50_ns, fork.max_ns) == (None, 0.0, 0.0)


# -- the flag rule ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p50", "p99", "flagged"),
    [(1_000.0, 10_000.0, True), (1_000.0, 9_999.0, False), (1_000.0, 250_000.0, True), (0.0, 5_000.0, False)],
)
def test_tail_flag_is_set_from_p99_equal_to_ten_times_p50(p50: float, p99: float, flagged: bool) -> None:
    assert (FLAG_TAIL in op_flags(Source.CUDA, p50, p99, None, None)) is flagged
    assert (FLAG_TAIL in op_flags(Source.DRIVER, p50, p99, None, None)) is flagged


def test_host_events_never_get_a_tail_flag() -> None:
    assert op_flags(Source.HOST, 1_000.0, 1_000_000.0, None, None) == ()


@pytest.mark.parametrize(
    ("now", "before", "flagged"),
    [(0.70, 0.50, True), (0.69, 0.50, False), (0.30, 0.0, True), (0.90, None, False), (None, 0.1, False)],
)
def test_share_flag_is_set_when_the_share_jumps_by_twenty_points(
    now: float | None, before: float | None, flagged: bool
) -> None:
    assert (FLAG_SHARE in op_flags(Source.CUDA, 1.0, 1.0, now, before)) is flagged


def test_a_heavy_tail_in_real_histograms_is_flagged_and_a_light_one_is_not() -> None:
    collector, clock = FakeCollector(), FrozenClock()
    collector.add(Op.cudaStreamSynchronize, [1_000_000] * 97 + [142_000_000] * 3)
    collector.add(Op.cudaLaunchKernel, [5_000] * 97 + [45_000] * 3)  # 9x: under the line
    clock.advance(1.0)
    snap = builder(collector, clock).build()
    assert row(snap, Op.cudaStreamSynchronize).flags == (FLAG_TAIL,)
    assert row(snap, Op.cudaLaunchKernel).flags == ()


def test_a_jump_in_time_share_is_flagged_in_the_interval_it_happens() -> None:
    # given two quiet seconds where cudaMemcpy takes 10 % of the runtime's time
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock)
    for _ in range(2):
        collector.add(Op.cudaLaunchKernel, [9_000] * 100)
        collector.add(Op.cudaMemcpy, [1_000] * 100)
        clock.advance(1.0)
        quiet = b.build()
    # when copies take 90 % of it in the next second
    collector.add(Op.cudaLaunchKernel, [1_000] * 100)
    collector.add(Op.cudaMemcpy, [9_000] * 100)
    clock.advance(1.0)
    jump = b.build()
    # then
    assert FLAG_SHARE not in row(quiet, Op.cudaMemcpy).flags
    assert FLAG_SHARE in row(jump, Op.cudaMemcpy).flags
    assert FLAG_SHARE not in row(jump, Op.cudaLaunchKernel).flags


# -- findings ----------------------------------------------------------------------------


def test_tail_finding_names_the_process_that_preempted_traced_threads_in_the_window() -> None:
    # given a sync op with a heavy tail and 23 preemptions, 20 by `stress`
    collector, clock = FakeCollector(), FrozenClock()
    collector.add(Op.cudaStreamSynchronize, [2_000_000] * 95 + [142_000_000] * 5)
    collector.preempt(4711, [2_100_000] * 20)
    collector.preempt(99, [2_100_000] * 3)
    clock.advance(1.0)
    comms = {4711: "stress", 99: "kworker"}
    b = builder(collector, clock, findings=[TailLatencyFindings(comms.get)])
    # when
    snap = b.build()
    # then
    assert snap.findings == (
        "cudaStreamSynchronize p99 = 142.0 ms (71× p50 2.0 ms) — 23 preemptions, 20 by `stress` (pid 4711),"
        " avg 2.1 ms off-CPU",
    )
    assert row(snap, Op.sched_switch).note == "23 preempted"


def test_the_tracers_own_preemptions_are_its_overhead_never_the_culprit() -> None:
    # given traced threads preempted 20 times by the agent itself and 3 times by `kworker`
    collector, clock = FakeCollector(), FrozenClock()
    collector.add(Op.cudaStreamSynchronize, [2_000_000] * 95 + [142_000_000] * 5)
    collector.preempt(555, [2_100_000] * 20)
    collector.preempt(99, [2_100_000] * 3)
    clock.advance(1.0)
    b = builder(collector, clock, findings=[TailLatencyFindings({555: "gpuscope", 99: "kworker"}.get, agent_pid=555)])
    # when
    (line,) = b.build().findings
    # then the neighbour is named, and the agent only as overhead
    assert "3 by `kworker` (pid 99)" in line
    assert "20 by gpuscope itself: tracer overhead" in line
    assert "`gpuscope`" not in line


def test_preemptions_alone_give_a_finding_and_only_those_of_the_window_count() -> None:
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock, window_intervals=1, findings=[TailLatencyFindings({4711: "stress"}.get)])
    collector.preempt(4711, [1_000_000] * 5)
    clock.advance(1.0)
    b.build()
    collector.preempt(4711, [3_000_000] * 2)
    clock.advance(1.0)
    assert b.build().findings == (
        "traced threads: 2 preemptions by `stress` (pid 4711), avg 3.0 ms off-CPU in the last 1 s",
    )
    clock.advance(1.0)
    assert b.build().findings == ()


def test_drops_in_the_last_interval_give_a_finding_with_the_remedy() -> None:
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock, findings=[DropFindings()])
    collector.dropped = 1_500
    clock.advance(1.0)
    (line,) = b.build().findings
    assert line.startswith("1,500 events dropped in the last second")
    # the advice is the one measured to help (a larger ring), never --entry-only
    assert "--ring-size 128m" in line and "--entry-only" not in line
    assert "lower bounds" in line
    clock.advance(1.0)
    assert b.build().findings == ()


# -- the thread and the collector's side ------------------------------------------------------


def test_the_builder_thread_posts_snapshots_until_stopped() -> None:
    collector = FakeCollector()
    collector.add(Op.cudaLaunchKernel, [5_000] * 10)
    posted: queue.Queue[LiveSnapshot] = queue.Queue()
    b = SnapshotBuilder(collector, posted.put, system=FixedSystem(), interval_s=0.01)
    with b:
        first = posted.get(timeout=5)
        posted.get(timeout=5)
    assert row(first, Op.cudaLaunchKernel).count == 10
    # stop() joined the thread: nothing can post any more
    assert not any(t.name == "gpuscope-snapshots" for t in threading.enumerate())


def _batch(ops: list[int], durations: list[int], preempted: list[int], next_tgid: list[int]) -> np.ndarray:
    ev = np.zeros(len(ops), dtype=EVENT_DTYPE)
    ev["op"] = ops
    ev["duration_ns"] = durations
    ev["arg0"] = preempted
    ev["handle"] = [(t << 32) | (t + 1) for t in next_tgid]
    ev["pid"] = 10
    return ev


def test_live_stats_count_preemptions_per_preempting_process_and_copy_is_independent() -> None:
    stats = LiveStats()
    sw = int(Op.sched_switch)
    stats.update(_batch([sw, sw, sw, int(Op.cudaMalloc)], [1_000, 2_000, 4_000, 50], [1, 0, 1, 0], [4711, 5, 4711, 0]))
    copy = stats.copy()
    stats.update(_batch([sw], [8_000], [1], [77]))
    assert (copy.events, copy.preempted, copy.preempted_ns, copy.preemptors) == (4, 2, 5_000, {4711: 2})
    assert copy.per_op[sw].count == 3
    assert (stats.preempted, stats.preemptors) == (3, {4711: 2, 77: 1})
    assert stats.per_op[sw].count == 4


def test_live_stats_copy_is_consistent_while_the_collector_updates() -> None:
    # given a thread folding batches in as fast as it can
    stats = LiveStats()
    batch = _batch([int(Op.cudaLaunchKernel)] * 64, [5_000] * 64, [0] * 64, [0] * 64)
    stop = threading.Event()

    def collect() -> None:
        while not stop.is_set():
            stats.update(batch)

    t = threading.Thread(target=collect)
    t.start()
    try:
        # when copies are taken meanwhile, then each is internally consistent
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            c = stats.copy()
            h: LatencyHistogram | None = c.per_op.get(int(Op.cudaLaunchKernel))
            if h is not None:
                assert h.count == int(h.counts.sum()) == c.events
    finally:
        stop.set()
        t.join(5)


def test_ops_probed_in_windows_show_estimated_counts_and_the_measured_self_cost() -> None:
    # given 2 s in which launches were probed for 0.5 s (250 seen) and syncs all the time
    collector, clock = FakeCollector(), FrozenClock()
    b = builder(collector, clock)
    collector.sampled_ops = frozenset({int(Op.cudaLaunchKernel)})
    collector.budget = 0.01
    collector.add(Op.cudaLaunchKernel, [1_000] * 250)
    collector.add(Op.cudaStreamSynchronize, [50_000] * 20)
    collector.covered_ns, collector.elapsed_ns = 500_000_000, 2_000_000_000
    collector.self_costs = ((4242, 0.007),)
    clock.advance(1.0)
    snap = b.build()
    # then the launch count is the estimate, marked, with what was seen; the sync count is exact
    launches, syncs = row(snap, Op.cudaLaunchKernel), row(snap, Op.cudaStreamSynchronize)
    assert launches.estimated and launches.count == 1_000 and launches.seen == 250 and launches.coverage == 0.25
    assert not syncs.estimated and syncs.count == 20
    # and one line says what gpuscope costs and what is estimated, also in the JSON stream
    assert snap.sampling_line() == (
        "gpuscope: 0.7% of pid 4242's time (budget 1%, measured) · ≈ cudaLaunchKernel probed 25% of the time"
    )
    d = snap.to_dict()
    op_rows = d["ops"]
    assert isinstance(op_rows, list), d
    ops = {o["op"]: o for o in op_rows}
    assert ops["cudaLaunchKernel"]["estimated"] is True and "estimated" not in ops["cudaStreamSynchronize"]
    assert d["self_cost"] == [{"pid": 4242, "share": 0.007}]
