"""Exact per-interval aggregates of every event, stored or not.

Every event read from the kernel is counted here, one row per (1-second
bucket, pid, op): count, duration sum/min/max, bytes, and a sparse latency
histogram. Selective storage may drop individual rows; counts, rates and
percentiles computed from aggregates do not change between modes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuscope.model.latency import NBUCKETS, bucket_index

BUCKET_NS = 1_000_000_000
_HIST_DTYPE = np.dtype([("idx", "<u2"), ("n", "<u4")])


def encode_hist(counts: np.ndarray) -> bytes:
    """Pack a latency histogram sparsely: (bucket index u16, count u32) pairs for non-empty buckets."""
    nz = np.flatnonzero(counts)
    out = np.empty(len(nz), dtype=_HIST_DTYPE)
    out["idx"] = nz
    out["n"] = counts[nz]
    return out.tobytes()


def decode_hist(blob: bytes | None) -> np.ndarray:
    """Unpack ``encode_hist``'s bytes into dense bucket counts (all zero for None)."""
    counts = np.zeros(NBUCKETS, dtype=np.int64)
    if blob:
        arr = np.frombuffer(blob, dtype=_HIST_DTYPE)
        np.add.at(counts, arr["idx"].astype(np.int64), arr["n"].astype(np.int64))
    return counts


def _groups_structured(
    buckets: np.ndarray, ev: np.ndarray
) -> tuple[list[tuple[int, int, int]], np.ndarray, np.ndarray]:
    """Group by (bucket, pid, op) through a structured sort: for batches spanning 2**16 buckets or more."""
    keys = np.empty(len(ev), dtype=[("b", "<i8"), ("pid", "<u4"), ("op", "<u2")])
    keys["b"], keys["pid"], keys["op"] = buckets, ev["pid"], ev["op"]
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    groups = [(int(b), int(p), int(o)) for b, p, o in sk[starts].tolist()]
    return groups, order, starts


@dataclass
class _Agg:
    count: int = 0
    stored: int = 0
    sum_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    bytes: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(NBUCKETS, dtype=np.int64))


class Aggregator:
    """Accumulate batches; hand out rows for buckets that are complete."""

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self._aggs: dict[tuple[int, int, int], _Agg] = {}

    def add(self, ev: np.ndarray, kept: np.ndarray) -> None:
        """Count a batch; ``kept`` says which of its events are stored as rows."""
        if not len(ev):
            return
        # One sort of one integer key groups the batch: sorting a structured
        # array compares field by field in C and cost ~1.5 us an event.
        buckets = (ev["ts_ns"] // BUCKET_NS).astype(np.int64)
        first = int(buckets.min())
        if int(buckets.max()) - first >= 1 << 16:
            self._add_groups(ev, kept, *_groups_structured(buckets, ev))
            return
        key = (
            ((buckets - first).astype(np.uint64) << np.uint64(48))
            | (ev["pid"].astype(np.uint64) << np.uint64(16))
            | ev["op"].astype(np.uint64)
        )
        order = np.argsort(key, kind="stable")
        sk = key[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        uk = sk[starts]
        groups = [(first + int(k >> 48), int((k >> 16) & 0xFFFFFFFF), int(k & 0xFFFF)) for k in uk.tolist()]
        self._add_groups(ev, kept, groups, order, starts)

    def _add_groups(
        self,
        ev: np.ndarray,
        kept: np.ndarray,
        groups: list[tuple[int, int, int]],
        order: np.ndarray,
        starts: np.ndarray,
    ) -> None:
        """Fold events into their aggregates: ``ev[order]`` holds group g from ``starts[g]`` on."""
        dur = ev["duration_ns"].astype(np.int64)[order]
        counts = np.diff(np.r_[starts, len(order)])
        stored = np.add.reduceat(kept[order].astype(np.int64), starts)
        sums = np.add.reduceat(dur, starts)
        mins = np.minimum.reduceat(dur, starts)
        maxs = np.maximum.reduceat(dur, starts)
        nbytes = np.add.reduceat(ev["bytes"].astype(np.int64)[order], starts)
        group_of = np.repeat(np.arange(len(starts)), counts)
        hists = np.bincount(group_of * NBUCKETS + bucket_index(dur), minlength=len(starts) * NBUCKETS).reshape(
            len(starts), NBUCKETS
        )
        for g, (b, pid, op) in enumerate(groups):
            key = (b * BUCKET_NS, pid, op)
            a = self._aggs.get(key)
            if a is None:
                a = self._aggs[key] = _Agg(min_ns=int(mins[g]))
            a.count += int(counts[g])
            a.stored += int(stored[g])
            a.sum_ns += int(sums[g])
            a.min_ns = min(a.min_ns, int(mins[g]))
            a.max_ns = max(a.max_ns, int(maxs[g]))
            a.bytes += int(nbytes[g])
            a.hist += hists[g]

    def take(self, before_ns: int | None = None) -> list[tuple[object, ...]]:
        """Rows of buckets that started before ``before_ns`` (all when None), removed."""
        done = [k for k in self._aggs if before_ns is None or k[0] + BUCKET_NS <= before_ns]
        rows: list[tuple[object, ...]] = []
        for k in sorted(done):
            a = self._aggs.pop(k)
            rows.append(
                (self.session_id, *k, a.count, a.stored, a.sum_ns, a.min_ns, a.max_ns, a.bytes, encode_hist(a.hist))
            )
        return rows


INSERT_AGGREGATES = (
    "INSERT INTO event_aggregates(session_id, bucket_ns, pid, op_id, count, stored, sum_duration_ns, "
    "min_duration_ns, max_duration_ns, sum_bytes, histogram) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(session_id, bucket_ns, pid, op_id) DO UPDATE SET count = count + excluded.count, "
    "stored = stored + excluded.stored, sum_duration_ns = sum_duration_ns + excluded.sum_duration_ns, "
    "min_duration_ns = min(min_duration_ns, excluded.min_duration_ns), "
    "max_duration_ns = max(max_duration_ns, excluded.max_duration_ns), sum_bytes = sum_bytes + excluded.sum_bytes, "
    "histogram = gs_hist_merge(histogram, excluded.histogram)"
)


def insert_aggregates(conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]]) -> None:
    """Add rows from ``Aggregator.take`` to the stored aggregates, merging into buckets stored already.

    ``conn`` must come from ``connect_writer``: the merge needs its ``gs_hist_merge`` function.
    """
    conn.executemany(INSERT_AGGREGATES, rows)


def insert_system_sample(
    conn: sqlite3.Connection,
    session_id: int,
    wall_ns: int,
    cpu_pct: float | None,
    mem_pct: float,
    mem_available_bytes: int,
    swap_used_bytes: int,
    load1: float,
    cpus: int,
) -> None:
    """One second's host sample (the live view's system bar), kept for the dashboard and ``snapshots``."""
    conn.execute(
        "INSERT OR REPLACE INTO system_samples(session_id, wall_ns, cpu_pct, mem_pct, mem_available_bytes, "
        "swap_used_bytes, load1, cpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, wall_ns, cpu_pct, mem_pct, mem_available_bytes, swap_used_bytes, load1, cpus),
    )


def insert_drops(conn: sqlite3.Connection, session_id: int, bucket_ns: int, drops: dict[str, int]) -> None:
    """Add the events dropped since the last call, by source, to a second's ``drop_log`` row."""
    conn.executemany(
        "INSERT INTO drop_log(session_id, bucket_ns, source, dropped) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(session_id, bucket_ns, source) DO UPDATE SET dropped = dropped + excluded.dropped",
        [(session_id, bucket_ns, src, n) for src, n in sorted(drops.items()) if n > 0],
    )
