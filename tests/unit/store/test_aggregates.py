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
