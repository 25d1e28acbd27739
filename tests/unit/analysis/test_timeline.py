"""The dashboard timeline's per-interval figures, from a window's events: counts, means and slowest calls per op."""

from __future__ import annotations

from gpuscope.analysis.timeline import op_timeline
from gpuscope.model.ops import Op

from .builder import MS, US, Events


def test_each_ops_intervals_hold_its_calls_count_mean_and_slowest() -> None:
    # given syncs of 1, 3 and 8 ms in the first 10 ms, one of 2 ms in the third, and launches throughout
    ev = Events()
    for t, d in ((0, 1 * MS), (2 * MS, 3 * MS), (6 * MS, 8 * MS), (25 * MS, 2 * MS)):
        ev.add(Op.cudaStreamSynchronize, t, d)
    for i in range(30):
        ev.add(Op.cudaLaunchKernel, i * MS + 500 * US, 5 * US)
    frame, _ = ev.frame()
    # when cut into 10 ms intervals from 0 to 30 ms
    series = {s.op: s for s in op_timeline(frame, 0, 30 * MS, 10 * MS)}
    # then the syncs have two intervals (none where they made no call), with exact counts, means and maxima
    sync = series["cudaStreamSynchronize"]
    assert sync.source == "cuda"
    assert sync.points == [(0, 3, 4 * MS, 8 * MS), (2, 1, 2 * MS, 2 * MS)]
    # and the launches one point per interval, ten calls each
    assert [(b, n) for b, n, _, _ in series["cudaLaunchKernel"].points] == [(0, 10), (1, 10), (2, 10)]


def test_only_calls_that_start_inside_the_span_count() -> None:
    ev = Events()
    for i in range(10):
        ev.add(Op.cudaMalloc, i * MS, 100 * US)
    frame, _ = ev.frame()
    (series,) = op_timeline(frame, 3 * MS, 6 * MS, 1 * MS)
    assert [b for b, *_ in series.points] == [0, 1, 2, 3]
    assert sum(n for _, n, _, _ in series.points) == 4


def test_a_span_without_calls_has_no_series() -> None:
    ev = Events()
    ev.add(Op.cudaMalloc, 0, 100 * US)
    frame, _ = ev.frame()
    assert op_timeline(frame, 10 * MS, 20 * MS, MS) == []
