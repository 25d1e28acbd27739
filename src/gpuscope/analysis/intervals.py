"""Interval and id arithmetic on arrays: overlap by sorting and searchsorted, never a loop per event."""

from __future__ import annotations

import numpy as np

# Queries per pass of ``overlap_ns``, and keys ``distinct`` puts through a set.
_QUERY_CHUNK = 1 << 18
_SET_KEYS = 4096


def distinct(keys: np.ndarray) -> np.ndarray:
    """``np.unique(keys)`` for ids (pids, tids, ops): sorted, without ``np.unique``'s cost where ids are few.

    A few thousand keys go through a set; many keys in a narrow range (the
    usual pids and tids) are counted; only the rest are sorted by
    ``np.unique``, whose first call also imports ``numpy.ma`` (40 ms).
    """
    n = len(keys)
    if n <= _SET_KEYS:
        return np.array(sorted(set(keys.tolist())), dtype=np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo <= 8 * n:
        counts = np.bincount(keys - lo, minlength=hi - lo + 1)
        found: np.ndarray = np.flatnonzero(counts) + lo
        return found
    return np.unique(keys)


def is_member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, pool)`` for large int64 arrays: one sort of ``pool`` and a binary search per value.

    ``np.isin`` sorts both arrays together (several times slower with millions on each side).
    """
    if len(pool) == 0:
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(pool)
    at = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    found: np.ndarray = ordered[at] == values
    return found


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint [start, end) pairs."""
    if len(starts) == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    group_end = np.maximum.reduceat(e, idx)
    return s[idx].astype(np.int64), group_end.astype(np.int64)


def overlap_ns(q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray) -> np.ndarray:
    """For each query [q_start, q_end], total time covered by disjoint sorted intervals.

    ``i_start``/``i_end`` must be disjoint and sorted (as from ``merge``).
    """
    if len(i_start) == 0 or len(q_start) == 0:
        return np.zeros(len(q_start), dtype=np.int64)
    length = i_end - i_start
    cum = np.concatenate(([0], np.cumsum(length)))
    if len(q_start) <= _QUERY_CHUNK:
        return _covered(q_start, q_end, i_start, i_end, cum)
    # In chunks: a dozen temporaries per query, which for millions of calls is hundreds of MB at once.
    out = np.empty(len(q_start), dtype=np.int64)
    for lo in range(0, len(q_start), _QUERY_CHUNK):
        hi = lo + _QUERY_CHUNK
        out[lo:hi] = _covered(q_start[lo:hi], q_end[lo:hi], i_start, i_end, cum)
    return out


def _covered(
    q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray, cum: np.ndarray
) -> np.ndarray:
    lo = np.searchsorted(i_end, q_start, side="right")  # first interval ending after q_start
    hi = np.searchsorted(i_start, q_end, side="left")  # intervals starting before q_end
    hi = np.maximum(hi, lo)
    total = cum[hi] - cum[lo]
    has = hi > lo
    first = np.minimum(lo, len(i_start) - 1)
    last = np.maximum(hi - 1, 0)
    head_cut = np.where(has, np.maximum(0, q_start - i_start[first]), 0)
    tail_cut = np.where(has, np.maximum(0, i_end[last] - q_end), 0)
    covered: np.ndarray = np.maximum(total - head_cut - tail_cut, 0)
    return covered


def overlap_by_key(
    q_key: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
    i_key: np.ndarray,
    i_start: np.ndarray,
    i_end: np.ndarray,
) -> np.ndarray:
    """Like ``overlap_ns`` but only between queries and intervals with the same key (tid, pid).

    One vectorised pass per distinct key (threads or processes, not events).
    """
    out = np.zeros(len(q_start), dtype=np.int64)
    if len(i_start) == 0 or len(q_start) == 0:
        return out
    for key in np.intersect1d(distinct(q_key), distinct(i_key), assume_unique=True):
        qm = q_key == key
        im = i_key == key
        s, e = merge(i_start[im], i_end[im])
        out[qm] = overlap_ns(q_start[qm], q_end[qm], s, e)
    return out


def count_in(q_start: np.ndarray, q_end: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each query, how many (sorted) points fall in [q_start, q_end]."""
    if len(points) == 0:
        return np.zeros(len(q_start), dtype=np.int64)
    counts: np.ndarray = np.searchsorted(points, q_end, side="right") - np.searchsorted(points, q_start, side="left")
    return counts


def attribute(
    q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray, i_label: np.ndarray
) -> dict[int, int]:
    """Total overlap of all queries with the intervals, per interval label (e.g. preemptor pid).

    Intervals must be disjoint and sorted (off-CPU spans of one thread are).
    Queries are merged first, so overlapping queries do not double count.
    """
    if len(i_start) == 0 or len(q_start) == 0:
        return {}
    qs, qe = merge(q_start, q_end)
    got = overlap_ns(i_start, i_end, qs, qe)
    out: dict[int, int] = {}
    keep = got > 0
    labels, inv = np.unique(i_label[keep], return_inverse=True)
    sums = np.bincount(inv, weights=got[keep].astype(np.float64), minlength=len(labels))
    for lab, s in zip(labels.tolist(), sums.tolist(), strict=True):
        out[int(lab)] = int(s)
    return out
