"""Reads of the call-stacks view: calls grouped by call site and by distinct stack."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from gpuscope.model.ops import Op
from gpuscope.store.stacks_read import CallSiteCount, StackCount, call_site_counts, has_call_stacks, stack_counts
from tests.unit.analysis.builder import Events

from .recordings import FIRST_SESSION, add_stack, reading, record, tie_stack

KV = "alloc (kv.py:211)"
FRAMES = [{"kind": "python", "function": "alloc", "file": "kv.py", "line": 211}]


def _recording(tmp_path: Path) -> Path:
    """Six cudaMalloc calls of pid 100: three from KV, one from elsewhere, one from an unnamed site, one without stack."""
    ev = Events()
    calls = [(1, 1000, 1), (2, 2000, 1), (3, 3000, 1), (4, 500, 2), (5, 700, 3), (6, 9000, None)]
    for ts, dur, _ in calls:
        ev.add(Op.cudaMalloc, ts, dur)
    path = record(ev, tmp_path / "rec.db")
    add_stack(path, 1, KV, FRAMES)
    add_stack(path, 2, "other (x.py:1)", [])
    add_stack(path, 3, None, [])
    for ts, _, stack_hash in calls:
        if stack_hash is not None:
            tie_stack(path, FIRST_SESSION, 100, 100, ts, stack_hash)
    return path


def test_only_a_database_with_the_call_stacks_view_has_call_stacks(tmp_path: Path) -> None:
    with reading(record(Events(), tmp_path / "rec.db")) as conn:
        assert has_call_stacks(conn)
    assert not has_call_stacks(sqlite3.connect(":memory:"))


def test_call_site_counts_group_the_calls_with_a_stack_by_site_most_calls_then_most_time_first(tmp_path: Path) -> None:
    with reading(_recording(tmp_path)) as conn:
        every = call_site_counts(conn)
        slow = call_site_counts(conn, op="cudaMalloc", min_duration_ns=1500)
        frees = call_site_counts(conn, op="cudaFree")
        other_pid = call_site_counts(conn, pid=200)
    assert every == [
        CallSiteCount(KV, 3, 6000),
        CallSiteCount("(unnamed)", 1, 700),
        CallSiteCount("other (x.py:1)", 1, 500),
    ]
    assert slow == [CallSiteCount(KV, 2, 5000)]
    assert frees == other_pid == []


def test_stack_counts_group_the_calls_by_stack_and_op_with_the_stored_frames(tmp_path: Path) -> None:
    with reading(_recording(tmp_path)) as conn:
        stacks = stack_counts(conn, session_id=FIRST_SESSION)
    assert stacks[0] == StackCount(1, "cudaMalloc", 3, 6000, KV, json.dumps(FRAMES), None)
    assert [s.stack_hash for s in stacks] == [1, 3, 2]
