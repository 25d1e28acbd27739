"""Interval and id arithmetic on arrays: overlap by sorting and searchsorted, never a loop per event."""

from __future__ import annotations

import numpy as np

# Queries per pass of ``overlap_ns``, and keys ``distinct`` puts through a set.
_QUERY_CHUNK = 1 << 18
_SET_KEYS = 4096
# ``overlap_ns`` first screens this many queries or more by time bins, about this many bins per interval.
_SCREEN_QUERIES = 1 << 15
_SCREEN_BINS_PER_INTERVAL = 16
_SCREEN_MAX_BINS = 1 << 24
_SCREEN_LOOP = 256  # long intervals marked one by one up to this many, else by a running sum
# Up to this many keys, ``KeyGroups`` finds each key's positions by a pass over the keys instead of a sort.
_SCAN_KEYS = 8


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


def intersect_all(groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The time every group's intervals cover at once, as sorted, disjoint [start, end) pairs."""
    if not groups:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    merged = [merge(s, e) for s, e in groups]
    at = np.concatenate([np.concatenate([s, e]) for s, e in merged])
    step = np.concatenate([np.concatenate([np.ones(len(s)), -np.ones(len(e))]) for s, e in merged])
    order = np.lexsort((step, at))  # at one instant, ends before starts: touching intervals do not meet
    at, depth = at[order], np.cumsum(step[order])
    full = np.flatnonzero(depth == len(groups))
    ends = at[np.minimum(full + 1, len(at) - 1)]
    keep = ends > at[full]
    return at[full][keep].astype(np.int64), ends[keep].astype(np.int64)


def outermost(tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which calls are not inside an earlier call of the same thread (by start time within each thread).

    A runtime call makes its driver call inside it (cudaLaunchKernel -> cuLaunchKernel): counted once.
    """
    out = np.ones(len(tids), dtype=bool)
    for tid in distinct(tids).tolist():
        idx = np.flatnonzero(tids == tid)
        idx = idx[np.argsort(starts[idx], kind="stable")]
        e = ends[idx]
        before = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], e[:-1])))
        out[idx] = e > before
    return out


def overlap_ns(q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray) -> np.ndarray:
    """For each query [q_start, q_end], total time covered by disjoint sorted intervals.

    ``i_start``/``i_end`` must be disjoint and sorted (as from ``merge``).
    """
    if len(i_start) == 0 or len(q_start) == 0:
        return np.zeros(len(q_start), dtype=np.int64)
    length = i_end - i_start
    cum = np.concatenate(([0], np.cumsum(length)))
    near = _may_meet(q_start, q_end, i_start, i_end) if len(q_start) >= _SCREEN_QUERIES else None
    if near is None:
        return _covered_in_chunks(q_start, q_end, i_start, i_end, cum)
    out = np.zeros(len(q_start), dtype=np.int64)
    out[near] = _covered_in_chunks(q_start[near], q_end[near], i_start, i_end, cum)
    return out


def _may_meet(q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray) -> np.ndarray | None:
    """Positions of the queries that may overlap an interval: every other one overlaps none.

    Time is cut in bins, and the bins an interval touches are marked. A query that
    lies within two bins and touches no marked bin meets no interval. Two binary
    searches per query cost about 30 ns each with millions of calls, while most
    calls meet no off-CPU interval or I/O and two bin lookups say so for a few ns.
    None when most queries would be searched anyway.
    """
    # Both ends of every query inside the bins, even of a query that ends before it starts (a hand-edited file).
    lo = min(int(q_start.min()), int(q_end.min()), int(i_start[0]))
    hi = max(int(q_start.max()), int(q_end.max()), int(i_end[-1]))
    bins = min(_SCREEN_BINS_PER_INTERVAL * len(i_start), _SCREEN_MAX_BINS)
    shift = ((hi - lo) // bins).bit_length()  # bins of 2**shift ns: about ``bins`` of them
    n = ((hi - lo) >> shift) + 1
    # Each interval marks the bins it touches: its first and last, and those between for the long ones.
    a = i_start - lo
    a >>= shift
    b = i_end - lo
    b >>= shift
    marked = np.zeros(n, dtype=bool)
    marked[a] = True
    marked[b] = True
    long = np.flatnonzero(b - a >= 2)
    if len(long) <= _SCREEN_LOOP:
        for k in long.tolist():
            marked[a[k] : b[k] + 1] = True
    else:
        # +1 at a long interval's first bin, -1 after its last. The intervals are disjoint, so neither index
        # repeats and at most two are open in one bin: a byte per bin (up to 16 MB), not a count.
        edges = np.zeros(n + 1, dtype=np.int8)
        edges[a[long]] += 1
        edges[b[long] + 1] -= 1
        marked |= np.cumsum(edges[:n], dtype=np.int8) > 0
    first = q_start - lo
    first >>= shift
    last = q_end - lo
    last >>= shift
    meet = marked[first]
    meet |= marked[last]
    last -= first
    meet |= (last & ~1) != 0  # a query over more than two bins (or not a span) is searched exactly
    near = np.flatnonzero(meet)
    return near if len(near) <= len(q_start) // 2 else None


def _covered_in_chunks(
    q_start: np.ndarray, q_end: np.ndarray, i_start: np.ndarray, i_end: np.ndarray, cum: np.ndarray
) -> np.ndarray:
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
    covered = np.zeros(len(q_start), dtype=np.int64)
    # Only the queries that meet an interval: off-CPU time and I/O cover a few percent of most calls.
    at = np.flatnonzero(hi > lo)
    lo, hi = lo[at], hi[at]
    head_cut = q_start[at] - i_start[lo]
    np.maximum(head_cut, 0, out=head_cut)
    tail_cut = i_end[hi - 1] - q_end[at]
    np.maximum(tail_cut, 0, out=tail_cut)
    total = cum[hi] - cum[lo]
    total -= head_cut
    total -= tail_cut
    covered[at] = np.maximum(total, 0)
    return covered


class KeyGroups:
    """Positions of an array grouped by its values (threads, processes): one grouping, reused by every overlap.

    ``keys``: the distinct values, sorted; ``members``: per key, its positions
    (ascending; int32 below 2**31 elements). A plain class: a dataclass costs
    every command a millisecond or two of start-up.
    """

    __slots__ = ("keys", "members")

    def __init__(self, keys: np.ndarray, members: tuple[np.ndarray, ...]) -> None:
        self.keys = keys
        self.members = members

    @classmethod
    def of(cls, key: np.ndarray) -> KeyGroups:
        """Group ``key``'s positions by value."""
        keys = distinct(key)
        small = len(key) < 1 << 31  # positions as int32: callers keep the grouping for a whole analysis
        if len(keys) <= _SCAN_KEYS:
            # A pass per key: for a handful of threads, cheaper than any sort.
            found = [np.flatnonzero(key == k) for k in keys.tolist()]
            return cls(keys, tuple(f.astype(np.int32) if small else f for f in found))
        # Many keys: number them (by a table where they span a narrow range, as ``distinct`` counts them),
        # then a stable sort of the small numbers (a radix sort), cut where the number changes.
        number_type = np.uint16 if len(keys) <= 1 << 16 else np.int64
        lo, span = int(keys[0]), int(keys[-1]) - int(keys[0]) + 1
        if span <= 8 * len(key):
            number = np.zeros(span, dtype=number_type)
            number[keys - lo] = np.arange(len(keys))
            rank = number[key - lo]
        else:
            rank = np.searchsorted(keys, key).astype(number_type)
        order = np.argsort(rank, kind="stable")
        if small:
            order = order.astype(np.int32)
        bounds = np.cumsum(np.bincount(rank, minlength=len(keys)))[:-1]
        return cls(keys, tuple(np.split(order, bounds)))

    def positions(self, g: int) -> np.ndarray:
        """Positions of the ``g``-th key (ascending)."""
        return self.members[g]


def overlap_by_key(
    q_key: np.ndarray | KeyGroups,
    q_start: np.ndarray,
    q_end: np.ndarray,
    i_key: np.ndarray,
    i_start: np.ndarray,
    i_end: np.ndarray,
) -> np.ndarray:
    """Like ``overlap_ns`` but only between queries and intervals with the same key (tid, pid).

    ``q_key``: the queries' keys, or their ``KeyGroups`` when the caller keeps
    one for many calls. One vectorised pass per distinct key (threads or
    processes, not events).
    """
    out = np.zeros(len(q_start), dtype=np.int64)
    if len(i_start) == 0 or len(q_start) == 0:
        return out
    groups = q_key if isinstance(q_key, KeyGroups) else KeyGroups.of(q_key)
    present = distinct(i_key)
    for g, key in enumerate(groups.keys.tolist()):
        j = int(np.searchsorted(present, key))
        if j == len(present) or present[j] != key:
            continue
        qm = groups.positions(g)
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
    return attribute_merged(*merge(q_start, q_end), i_start, i_end, i_label)


def attribute_merged(
    qs: np.ndarray, qe: np.ndarray, i_start: np.ndarray, i_end: np.ndarray, i_label: np.ndarray
) -> dict[int, int]:
    """``attribute`` of queries already merged (disjoint and sorted, as from ``merge``)."""
    if len(i_start) == 0 or len(qs) == 0:
        return {}
    got = overlap_ns(i_start, i_end, qs, qe)
    keep = got > 0
    return sum_by_label(i_label[keep], got[keep])


def sum_by_label(labels: np.ndarray, weights: np.ndarray) -> dict[int, int]:
    """The sum of the (integer) ``weights`` of each distinct label, in label order.

    A pass per label while they are few (a thread's preemptors usually are),
    then one sort for the rest.
    """
    out: dict[int, int] = {}
    while len(labels) and len(out) < _SCAN_KEYS:
        mine = labels == labels[0]
        out[int(labels[0])] = int(weights[mine].sum())
        labels, weights = labels[~mine], weights[~mine]
    if len(labels):
        found, inv = np.unique(labels, return_inverse=True)
        sums = np.zeros(len(found), dtype=np.int64)
        np.add.at(sums, inv, weights)
        out.update(zip(found.tolist(), sums.tolist(), strict=True))
    return dict(sorted(out.items()))


def first_of_each(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True)``: the distinct keys, sorted, and where each first occurs.

    Without a sort of every key while the distinct ones are few.
    """
    found = distinct(keys)
    if len(found) > _SCAN_KEYS:
        values, first = np.unique(keys, return_index=True)
        return values, first
    return found, np.array([int(np.argmax(keys == k)) for k in found.tolist()], dtype=np.int64)
