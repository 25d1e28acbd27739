"""Attribution is an input of the analysis: loaded from the recording, carried by the context, read by the rules."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpuscope.analysis.attribution import Attribution, Communicator, Container, load_attribution
from gpuscope.analysis.engine import ExplainOptions, analyse, explain_db
from gpuscope.model.ops import Op
from gpuscope.recording import open_recording

from .builder import US, Events
from .test_rules_containers import CID_B, _preempted_by_other_cgroup

CID_A = "a" * 64


def _add_containers(db: Path) -> None:
    """Put pid 100 in cgroup 7 (container A) and name cgroup 88 as container B."""
    conn = sqlite3.connect(db)
    conn.executemany(
        "INSERT INTO cgroups(cgroup_id, hierarchy, path, container_id, runtime, first_seen_ns) "
        "VALUES (?, 'v2', ?, ?, 'docker', 0)",
        [(7, f"/system.slice/docker-{CID_A}.scope", CID_A), (88, f"/system.slice/docker-{CID_B}.scope", CID_B)],
    )
    conn.execute("UPDATE processes SET cgroup_id = 7, rank = 3 WHERE pid = 100")
    conn.execute(
        "INSERT INTO nccl_comms(session_id, pid, comm_handle, comm_hash, rank, nranks, ts_ns) "
        "VALUES (1, 100, 192, 4242, 3, 4, 0)"
    )
    conn.commit()
    conn.close()


def test_load_attribution_reads_ranks_containers_and_communicators_from_the_recording(tmp_path: Path) -> None:
    db = Events(comms={100: "train", 999: "stress"}).to_db(tmp_path / "rec.db")
    _add_containers(db)
    conn = open_recording(db)
    try:
        att = load_attribution(conn)
    finally:
        conn.close()
    assert att.ranks == {100: 3}
    assert att.communicators == {(100, 192): Communicator(4242, 3, 4)}
    assert att.container(88) == Container(88, f"/system.slice/docker-{CID_B}.scope", CID_B, "docker")
    assert att.container(0) is None and att.container(12345) is None


def test_the_communicators_initialised_in_the_window_are_added_to_what_the_context_carries() -> None:
    # given a context that knows pid 100's communicator, and a window with init calls of pids 100 and 101
    ev = Events()
    for pid, handle in ((100, 0xC0), (101, 0xC1)):
        ev.add(Op.ncclCommInitRank, 0, 50 * US, pid, handle=handle, stream=0x99, arg0=pid - 100, arg1=2)
    carried = Attribution(ranks={100: 7}, communicators={(100, 0xC0): Communicator(0x11, 5, 8)})
    # when
    att = ev.context(carried).window_attribution
    # then what the context carries wins where both name a communicator, and the frame adds the rest
    assert att.communicators == {(100, 0xC0): Communicator(0x11, 5, 8), (101, 0xC1): Communicator(0x99, 1, 2)}
    assert att.ranks == {100: 7}


def test_analyse_hands_its_attribution_to_the_rules() -> None:
    # given a process in cgroup 7 preempted by pid 999 of cgroup 88
    ev = Events(comms={100: "train", 999: "stress"})
    _preempted_by_other_cgroup(ev)
    frame, window = ev.frame()
    frame.cgroups[100] = 7
    att = Attribution(containers={88: Container(88, "/docker", CID_B, "docker")})

    def neighbours(attribution: Attribution | None) -> list[object]:
        report = analyse(frame, window) if attribution is None else analyse(frame, window, attribution=attribution)
        return [f.symptom.extra["neighbour"] for f in report.findings if f.kind == "noisy-neighbour"]

    # when / then: named by its container with the attribution, by its cgroup without
    assert neighbours(att) == [f"docker container {CID_B[:12]}"]
    assert neighbours(None) == ["cgroup 88"]


def test_explain_names_the_neighbour_by_the_container_recorded_for_its_cgroup(tmp_path: Path) -> None:
    # given a recording of the preemption whose cgroups table names both containers
    ev = Events(comms={100: "train", 999: "stress"})
    _preempted_by_other_cgroup(ev)
    db = ev.to_db(tmp_path / "rec.db")
    _add_containers(db)
    # when
    report = explain_db(db, ExplainOptions())
    # then
    (found,) = [f for f in report.findings if f.kind == "noisy-neighbour"]
    assert found.symptom.extra["neighbour"] == f"docker container {CID_B[:12]}"
    assert found.symptom.extra["container"] == f"docker container {CID_A[:12]}"
