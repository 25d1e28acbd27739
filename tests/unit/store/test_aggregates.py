"""Aggregates: rows taken from the aggregator add up to what was stored before."""

from __future__ import annotations

import sqlite3

import numpy as np

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.store.aggregates import BUCKET_NS, Aggregator, decode_hist, insert_aggregates


def _events(durations_ns: list[int]) -> np.ndarray:
    ev = np.zeros(len(durations_ns), dtype=EVENT_DTYPE)
    ev["ts_ns"] = 3 * BUCKET_NS + np.arange(len(durations_ns))
    ev["duration_ns"] = durations_ns
    ev["pid"], ev["op"], ev["bytes"] = 41, int(Op.cudaMalloc), 4096
    return ev


def test_aggregates_of_one_bucket_written_twice_merge_into_one_row(conn: sqlite3.Connection, session_id: int) -> None:
    # given: one bucket flushed early, then again when more of it arrived
    agg = Aggregator(session_id)
    first, later = _events([100, 300]), _events([50, 1_000, 200])
    agg.add(first, np.array([True, False]))
    insert_aggregates(conn, agg.take())
    agg.add(later, np.ones(3, dtype=bool))

    # when
    insert_aggregates(conn, agg.take())

    # then
    row = conn.execute(
        "SELECT bucket_ns, pid, op_id, count, stored, sum_duration_ns, min_duration_ns, max_duration_ns, sum_bytes, "
        "histogram FROM event_aggregates WHERE session_id = ?",
        (session_id,),
    ).fetchall()
    assert [r[:9] for r in row] == [(3 * BUCKET_NS, 41, int(Op.cudaMalloc), 5, 4, 1_650, 50, 1_000, 5 * 4096)]
    assert decode_hist(row[0][9]).sum() == 5


def _reference(ev: np.ndarray, kept: np.ndarray) -> dict[tuple[int, int, int], tuple[int, ...]]:
    """The aggregates, one event at a time: what ``Aggregator`` must equal."""
    from gpuscope.model.latency import bucket_index

    out: dict[tuple[int, int, int], list[int]] = {}
    hists: dict[tuple[int, int, int], np.ndarray] = {}
    for e, k in zip(ev.tolist(), kept.tolist(), strict=True):
        row = dict(zip(EVENT_DTYPE.names or (), e, strict=True))
        key = (row["ts_ns"] // BUCKET_NS * BUCKET_NS, row["pid"], row["op"])
        d = int(np.int64(np.uint64(row["duration_ns"])))
        a = out.setdefault(key, [0, 0, 0, d, d, 0])
        a[0] += 1
        a[1] += int(k)
        a[2] += d
        a[3], a[4] = min(a[3], d), max(a[4], d)
        a[5] += int(np.int64(np.uint64(row["bytes"])))
        h = hists.setdefault(key, np.zeros(len(decode_hist(None)), dtype=np.int64))
        h[int(bucket_index(np.array([d]))[0])] += 1
    return {k: (*v, *hists[k].tolist()) for k, v in out.items()}


def _int(x: object) -> int:
    assert isinstance(x, int), x
    return x


def _taken(agg: Aggregator) -> dict[tuple[int, int, int], tuple[int, ...]]:
    taken: dict[tuple[int, int, int], tuple[int, ...]] = {}
    for r in agg.take():
        hist = r[10]
        assert isinstance(hist, bytes), hist
        taken[(_int(r[1]), _int(r[2]), _int(r[3]))] = (*(_int(x) for x in r[4:10]), *decode_hist(hist).tolist())
    return taken


def test_aggregates_of_a_mixed_batch_equal_counting_event_by_event() -> None:
    # given a batch over three seconds, three processes and four ops, in arrival order
    rng = np.random.default_rng(7)
    n = 5_000
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = np.sort(rng.integers(5 * BUCKET_NS, 8 * BUCKET_NS, n)).astype(np.uint64)
    ev["pid"] = rng.choice([7, 4_000_000, 2**31 + 5], n)
    ev["op"] = rng.choice([int(Op.cudaLaunchKernel), int(Op.cudaMalloc), int(Op.sched_switch), 255], n)
    ev["duration_ns"] = rng.integers(0, 10**10, n).astype(np.uint64)
    ev["bytes"] = rng.integers(0, 2**40, n).astype(np.uint64)
    kept = rng.random(n) < 0.3
    agg = Aggregator(1)

    # when it is counted in two parts
    agg.add(ev[:1234], kept[:1234])
    agg.add(ev[1234:], kept[1234:])

    # then every (second, pid, op) matches the event-by-event count
    assert _taken(agg) == _reference(ev, kept)


def test_a_batch_spanning_more_than_65536_seconds_is_counted_in_the_right_buckets() -> None:
    # given two events a day and a half apart (the wide-span path)
    ev = _events([10, 20])
    ev["ts_ns"] = [BUCKET_NS, 200_000 * BUCKET_NS]
    agg = Aggregator(1)

    # when
    agg.add(ev, np.array([True, False]))

    # then
    assert _taken(agg) == _reference(ev, np.array([True, False]))
    assert sorted(k[0] for k in _reference(ev, np.array([True, False]))) == [BUCKET_NS, 200_000 * BUCKET_NS]
