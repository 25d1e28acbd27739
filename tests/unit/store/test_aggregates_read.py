"""Reads of the exact per-second aggregates: whether they cover a recording, and their rows over a window."""

from __future__ import annotations

from pathlib import Path

from gpuscope.model.ops import Op
from gpuscope.store.aggregates_read import aggregate_rows, aggregates_cover_recording
from tests.unit.analysis.builder import MS, Events

from .recordings import FIRST_SESSION, add_aggregates, add_events, add_session, reading, record

S = 1_000_000_000


def _launches(*seconds: float, pid: int = 100) -> Events:
    ev = Events()
    for s in seconds:
        ev.add(Op.cudaLaunchKernel, int(s * S), 5 * MS, pid=pid)
    return ev


def test_a_recording_without_aggregate_rows_is_not_covered(tmp_path: Path) -> None:
    with reading(record(_launches(0.5), tmp_path / "rec.db")) as conn:
        assert not aggregates_cover_recording(conn)


def test_a_recording_whose_every_session_with_events_has_aggregates_is_covered(tmp_path: Path) -> None:
    # given aggregates for the session with events, and a second session without events
    ev = _launches(0.5, 1.5)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    add_session(path, "idle", 0, 0)
    # then
    with reading(path) as conn:
        assert aggregates_cover_recording(conn)


def test_a_session_with_events_but_no_aggregates_leaves_the_recording_uncovered(tmp_path: Path) -> None:
    ev = _launches(0.5)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    add_events(path, add_session(path, "b", 0, 0), _launches(0.7))
    with reading(path) as conn:
        assert not aggregates_cover_recording(conn)


def test_aggregate_rows_are_those_of_the_buckets_the_window_touches(tmp_path: Path) -> None:
    # given one launch in each of the seconds 0, 1 and 2, and a window from 1 s to 2 s
    ev = _launches(0.5, 1.5, 2.5)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    # when
    with reading(path) as conn:
        rows = aggregate_rows(conn, S, 2 * S, S)
    # then
    assert sorted((bucket, pid, op, count) for bucket, pid, op, count, *_ in rows) == [
        (1 * S, 100, int(Op.cudaLaunchKernel), 1),
        (2 * S, 100, int(Op.cudaLaunchKernel), 1),
    ]
    assert all(r[5] == r[6] == r[7] == 5 * MS and r[9] for r in rows)


def test_aggregate_rows_of_chosen_pids_keep_every_host_row(tmp_path: Path) -> None:
    # given launches of two processes and a host event of the second
    ev = _launches(0.5)
    ev.add(Op.cudaLaunchKernel, S // 2, 5 * MS, pid=200)
    ev.sched(S // 2, 5 * MS, pid=200, preempted=True)
    path = record(ev, tmp_path / "rec.db")
    add_aggregates(path, FIRST_SESSION, ev)
    # when
    with reading(path) as conn:
        rows = aggregate_rows(conn, 0, S, S, (100,))
    # then
    assert sorted((pid, op) for _, pid, op, *_ in rows) == [
        (100, int(Op.cudaLaunchKernel)),
        (200, int(Op.sched_switch)),
    ]
