"""Reads of what is known of the traced processes: names, cgroups, and the pids of sessions."""

from __future__ import annotations

from pathlib import Path

from gpuscope.model.ops import Op
from gpuscope.store.processes_read import latest_event_comm, pids_of_sessions, process_rows
from tests.unit.analysis.builder import MS, Events

from .recordings import FIRST_SESSION, add_comm, add_events, add_process, add_session, reading, record


def test_process_rows_list_the_processes_of_each_session_oldest_session_first(tmp_path: Path) -> None:
    # given pid 100 named in the first session, and again with a cgroup in a later one
    ev = Events(comms={100: "train"})
    path = record(ev, tmp_path / "rec.db")
    later = add_session(path, "n", 0, 0)
    add_process(path, later, 100, "train2", cgroup_id=55)
    # when
    with reading(path) as conn:
        rows = process_rows(conn)
    # then
    assert rows == [(100, "train", None), (100, "train2", 55)]


def test_the_latest_event_comm_is_the_name_the_newest_event_of_the_process_carried(tmp_path: Path) -> None:
    # given pid 100's events named "train", then newer ones named "renamed"
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 0, 5)
    path = record(ev, tmp_path / "rec.db")
    with reading(path) as conn:
        before = latest_event_comm(conn, 100)
    add_comm(path, 2, "renamed")
    newer = Events()
    newer.add(Op.cudaLaunchKernel, MS, 5)
    add_events(path, FIRST_SESSION, newer, comm_id=2)
    # when
    with reading(path) as conn:
        after = latest_event_comm(conn, 100)
        unknown = latest_event_comm(conn, 300)
    # then
    assert (before, after, unknown) == ("train", "renamed", None)


def test_pids_of_sessions_are_the_processes_listed_for_those_sessions_only(tmp_path: Path) -> None:
    path = record(Events(comms={100: "train"}), tmp_path / "rec.db")
    second = add_session(path, "b", 0, 0)
    add_process(path, second, 200, "infer")
    add_process(path, second, 201, None)
    with reading(path) as conn:
        assert pids_of_sessions(conn, [second]) == frozenset({200, 201})
        assert pids_of_sessions(conn, [FIRST_SESSION, second]) == frozenset({100, 200, 201})
        assert pids_of_sessions(conn, []) == frozenset()
