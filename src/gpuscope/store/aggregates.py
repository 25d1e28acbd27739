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
        buckets = (ev["ts_ns"] // BUCKET_NS).astype(np.int64)
        keys = np.empty(len(ev), dtype=[("b", "<i8"), ("pid", "<u4"), ("op", "<u2")])
        keys["b"], keys["pid"], keys["op"] = buckets, ev["pid"], ev["op"]
        uniq, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.reshape(-1)
        dur = ev["duration_ns"].astype(np.int64)
        nbytes = ev["bytes"].astype(np.int64)
        hidx = bucket_index(dur)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
        for g, k in enumerate(uniq.tolist()):
            sel = order[bounds[g] : bounds[g + 1]]
            key = (int(k[0]) * BUCKET_NS, int(k[1]), int(k[2]))
            a = self._aggs.get(key)
            d = dur[sel]
            if a is None:
                a = self._aggs[key] = _Agg(min_ns=int(d.min()))
            a.count += len(sel)
            a.stored += int(np.count_nonzero(kept[sel]))
            a.sum_ns += int(d.sum())
            a.min_ns = min(a.min_ns, int(d.min()))
            a.max_ns = max(a.max_ns, int(d.max()))
            a.bytes += int(nbytes[sel].sum())
            a.hist += np.bincount(hidx[sel], minlength=NBUCKETS)

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


def insert_drops(conn: sqlite3.Connection, session_id: int, bucket_ns: int, drops: dict[str, int]) -> None:
    """Add the events dropped since the last call, by source, to a second's ``drop_log`` row."""
    conn.executemany(
        "INSERT INTO drop_log(session_id, bucket_ns, source, dropped) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(session_id, bucket_ns, source) DO UPDATE SET dropped = dropped + excluded.dropped",
        [(session_id, bucket_ns, src, n) for src, n in sorted(drops.items()) if n > 0],
    )
