"""The groupings the rules share (by thread, by process, by label) against the masks and sorts they replace."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.analysis import intervals
from gpuscope.analysis.frame import GPU_WORK, SYNC_OPS
from gpuscope.analysis.intervals import (
    KeyGroups,
    first_of_each,
    merge,
    overlap_by_key,
    overlap_ns,
    sum_by_label,
)
from gpuscope.model.ops import Op
from tests.unit.analysis.builder import US, Events


@pytest.mark.parametrize(
    ("n_keys", "span"), [(1, 1 << 40), (3, 1 << 40), (8, 1 << 40), (9, 1 << 40), (300, 1 << 40), (300, 400)]
)
def test_key_groups_hold_each_keys_positions_in_order(n_keys: int, span: int) -> None:
    # Up to 8 keys are found by a pass per key, more by a sort of their numbers, numbered by a binary search
    # (keys over a wide range) or a table (a narrow one): each must give np.flatnonzero's answer.
    rng = np.random.default_rng(n_keys + span)
    key = rng.choice(rng.choice(span, n_keys, replace=False) + 7, 5000)
    groups = KeyGroups.of(key)
    assert groups.keys.tolist() == sorted(set(key.tolist()))
    for g, k in enumerate(groups.keys.tolist()):
        assert groups.positions(g).tolist() == np.flatnonzero(key == k).tolist()


@pytest.mark.parametrize("n_keys", [2, 12])
def test_overlap_by_key_matches_one_overlap_per_key(n_keys: int) -> None:
    rng = np.random.default_rng(7 + n_keys)
    keys = np.arange(100, 100 + n_keys)
    q_key, i_key = rng.choice(keys, 2000), rng.choice(keys[: n_keys - 1], 400)  # one key has no interval
    q_start = rng.integers(0, 100_000, 2000)
    q_end = q_start + rng.integers(0, 3000, 2000)
    i_start = rng.integers(0, 100_000, 400)
    i_end = i_start + rng.integers(1, 2000, 400)
    expect = np.zeros(2000, dtype=np.int64)
    for k in keys.tolist():
        s, e = merge(i_start[i_key == k], i_end[i_key == k])
        expect[q_key == k] = overlap_ns(q_start[q_key == k], q_end[q_key == k], s, e)
    assert overlap_by_key(q_key, q_start, q_end, i_key, i_start, i_end).tolist() == expect.tolist()
    grouped = KeyGroups.of(q_key)
    assert overlap_by_key(grouped, q_start, q_end, i_key, i_start, i_end).tolist() == expect.tolist()
    assert expect.any() and not expect.all()  # the case covers both outcomes


@pytest.mark.parametrize("n_labels", [1, 8, 40])
def test_sum_by_label_sums_each_label_in_label_order(n_labels: int) -> None:
    rng = np.random.default_rng(n_labels)
    labels = rng.choice(rng.integers(0, 1 << 50, n_labels), 3000)
    weights = rng.integers(0, 1 << 30, 3000)
    got = sum_by_label(labels, weights)
    expect = {k: int(weights[labels == k].sum()) for k in sorted(set(labels.tolist()))}
    assert list(got.items()) == list(expect.items())
    assert sum_by_label(labels[:0], weights[:0]) == {}


@pytest.mark.parametrize("n_keys", [1, 5, 30])
def test_first_of_each_is_numpys_unique_with_index(n_keys: int) -> None:
    rng = np.random.default_rng(3 * n_keys)
    keys = rng.choice(rng.integers(0, 1 << 20, n_keys), 4000)
    values, first = first_of_each(keys)
    expect_values, expect_first = np.unique(keys, return_index=True)
    assert values.tolist() == expect_values.tolist() and first.tolist() == expect_first.tolist()


def _mixed_processes() -> Events:
    """Three processes with syncs, launches and copies interleaved in time, one thread of 101 with two tids."""
    ev = Events()
    rng = np.random.default_rng(11)
    ops = [Op.cudaStreamSynchronize, Op.cudaLaunchKernel, Op.cudaMemcpy, Op.cudaMalloc]
    for i in range(3000):
        pid = int(rng.choice([100, 101, 102]))
        ev.add(ops[int(rng.integers(0, 4))], i * 10 * US, int(rng.integers(1, 30)) * US, pid, pid + 1000 * (i % 2))
    return ev


def test_a_processes_calls_are_the_calls_its_mask_selects_in_time_order() -> None:
    ctx = _mixed_processes().context()
    f, c = ctx.frame, ctx.calls
    assert ctx.call_pids == [100, 101, 102]
    for p in ctx.call_pids:
        assert ctx.pid_calls(p).tolist() == np.flatnonzero(f.pid[c] == p).tolist()
        for ops in (GPU_WORK, SYNC_OPS, frozenset({int(Op.cudaMalloc), int(Op.cudaFree)})):
            mask = (f.pid[c] == p) & np.isin(f.op[c], list(ops))
            assert ctx.pid_calls_of(p, ops).tolist() == np.flatnonzero(mask).tolist()
    assert len(ctx.pid_calls_of(100, frozenset({int(Op.cudaFree)}))) == 0


def test_work_spans_are_the_union_of_a_processes_gpu_work_and_peers_the_union_of_the_others() -> None:
    ctx = _mixed_processes().context()
    f, c = ctx.frame, ctx.calls
    work = np.isin(f.op[c], list(GPU_WORK))
    for p in ctx.call_pids:
        mine = c[work & (f.pid[c] == p)]
        peers = c[work & (f.pid[c] != p)]
        for got, rows in ((ctx.work_spans(p), mine), (ctx.peer_work_spans(p), peers)):
            expect = merge(f.ts[rows], f.ts[rows] + f.dur[rows])
            assert got[0].tolist() == expect[0].tolist() and got[1].tolist() == expect[1].tolist()


def test_a_threads_call_spans_are_its_calls_in_its_own_process_merged() -> None:
    ev = _mixed_processes()
    ev.add(Op.cudaStreamSynchronize, 5 * US, 40 * US, pid=555, tid=100)  # tid 100 again, in another process
    ctx = ev.context()
    f, c = ctx.frame, ctx.calls
    rows = c[(f.tid[c] == 100) & (f.pid[c] == 100)]
    expect = merge(f.ts[rows], f.ts[rows] + f.dur[rows])
    got = ctx.thread_call_spans(100, 100)
    assert got[0].tolist() == expect[0].tolist() and got[1].tolist() == expect[1].tolist()
    assert len(ctx.thread_call_spans(100, 4242)[0]) == 0  # a thread that made no call


def test_a_call_is_affected_when_the_cause_covers_a_tenth_of_it() -> None:
    ev = Events()
    for i, dur in enumerate((100, 100, 100, 0)):
        ev.add(Op.cudaStreamSynchronize, i * 1000, dur)
    ctx = ev.context()
    cause = np.array([9, 10, 0, 1])  # below a tenth, a tenth, none, a zero-length call (counted as 1 ns)
    assert ctx.affected(cause).tolist() == [False, True, False, True]


@pytest.mark.parametrize("long_intervals", [3, 600])
def test_screened_overlaps_equal_the_exact_search_for_every_query(long_intervals: int) -> None:
    # Enough queries for overlap_ns to screen them by time bins first: short and long intervals (a few
    # marked one by one, many by a running sum), queries inside, across and between them, zero-length
    # ones, ones ending before they start, and ones before the first and after the last interval.
    rng = np.random.default_rng(long_intervals)
    starts = np.sort(rng.choice(np.arange(1_000_000, 900_000_000, 50), 20_000, replace=False))
    ends = starts + rng.integers(0, 40, len(starts))
    long = rng.choice(len(starts) - 1, long_intervals, replace=False)
    ends[long] = starts[long] + rng.integers(1000, 4000, long_intervals) * 50
    ends = np.minimum(ends, np.append(starts[1:], 10**12))  # disjoint and sorted, as overlap_ns requires
    i_start, i_end = merge(starts, ends)
    q_start = np.sort(rng.integers(0, 1_000_000_000, 60_000))
    q_end = q_start + rng.integers(0, 3000, len(q_start))  # most within two bins of the screen (4 us)
    q_end[::7] += 9000  # some over three or four bins
    q_end[::50] += 200_000  # some over many bins
    q_end[::97] = q_start[::97] - 5  # not spans
    q_end[::89] = q_start[::89]  # zero-length
    exact = intervals._covered_in_chunks(
        q_start, q_end, i_start, i_end, np.concatenate(([0], np.cumsum(i_end - i_start)))
    )
    assert intervals._may_meet(q_start, q_end, i_start, i_end) is not None  # the screen is used
    assert overlap_ns(q_start, q_end, i_start, i_end).tolist() == exact.tolist()
    assert 0 < int(np.count_nonzero(exact)) < len(exact) // 2
    # And the exact search itself against brute force, on a sample.
    for j in rng.choice(len(q_start), 300, replace=False).tolist():
        a, b = int(q_start[j]), int(q_end[j])
        want = int(np.maximum(0, np.minimum(i_end, b) - np.maximum(i_start, a)).sum()) if b >= a else 0
        assert int(exact[j]) == want


def test_queries_far_outside_the_intervals_and_reversed_are_answered_exactly() -> None:
    # A hand-edited file can hold a call that ends long before it starts: both its ends must fall in the bins
    # (the screen, which looks them up, then finds most bins marked and leaves every query to the exact search).
    starts = np.arange(0, 100_000_000, 10_000, dtype=np.int64)
    i_start, i_end = starts, starts + 100
    q_start = np.arange(0, 100_000_000, 1000, dtype=np.int64)
    q_end = q_start + 50
    q_end[7], q_start[-7] = -(10**9), 10**9  # reversed, far below and far above everything else
    cum = np.concatenate(([0], np.cumsum(i_end - i_start)))
    exact = intervals._covered_in_chunks(q_start, q_end, i_start, i_end, cum)
    assert len(q_start) >= intervals._SCREEN_QUERIES  # overlap_ns screens them first
    assert overlap_ns(q_start, q_end, i_start, i_end).tolist() == exact.tolist()
    assert int(exact[7]) == 0 and int(exact[-7]) == 0
