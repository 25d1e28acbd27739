"""The tracer's own CPU time is measured overhead: never a preemptor to blame, never a fix to move it away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analysis.engine import analyse
from gpuscope.analysis.overhead import TracerIdentity
from gpuscope.cli import main
from gpuscope.model.ops import Op

from .builder import MS, US, Events, S, end_session, steady_training

AGENT = 555  # the pid of the gpuscope trace that made the recording
STRESS = 999


def _preempt(ev: Events, syncs: list[int], every: int, offset: int, by_pid: int) -> int:
    """Make every ``every``-th sync (from ``offset``) 5 ms longer, preempted by ``by_pid``; return the time taken."""
    taken = 0
    for i, t in enumerate(syncs):
        if i % every == offset:
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=by_pid)
            taken += 5 * MS
    return taken


def _explain(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str]:
    rc = main(["explain", "--db", str(db), *argv])
    return rc, capsys.readouterr().out


def _culprit_pids(doc: dict[str, Any]) -> set[int]:
    return {c.get("pid") for f in doc["findings"] for cause in f["causes"] for c in cause["culprits"]}


def test_the_tracer_preempting_traced_threads_is_overhead_not_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given syncs slowed only by the recording's own agent taking their CPU
    ev = Events(comms={100: "train", AGENT: "gpuscope"})
    taken = _preempt(ev, steady_training(ev, 400), 4, 0, AGENT)
    db = ev.to_db(tmp_path / "t.db", agent_pid=AGENT)
    end_session(db, 4 * S + 100 * MS)
    # when explained
    doc = json.loads(_explain(capsys, db, "--json")[1])
    _, text = _explain(capsys, db)
    # then nothing blames it or tells the user to move it; its time is reported as tracer overhead
    assert "cpu-preemption" not in [f["kind"] for f in doc["findings"]]
    assert AGENT not in _culprit_pids(doc)
    over = doc["overhead"]
    assert over["tracer_pids"] == [AGENT] and over["tracer_pids_from"] == "sessions"
    assert over["preempted_ns"] == taken and over["share"] == 1.0
    assert over["in_calls_ns"] == taken and over["in_calls_share"] == 1.0
    assert "move `gpuscope`" not in text and "tracer overhead" in text.lower()
    assert f"pid {AGENT}" in text


def test_other_preemptors_stay_findings_beside_the_tracer_overhead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given syncs preempted by a CPU hog and, as often, by the agent
    ev = Events(comms={100: "train", STRESS: "stress", AGENT: "gpuscope"})
    syncs = steady_training(ev, 400)
    hog = _preempt(ev, syncs, 4, 0, STRESS)
    own = _preempt(ev, syncs, 4, 2, AGENT)
    db = ev.to_db(tmp_path / "t.db", agent_pid=AGENT)
    end_session(db, 4 * S + 100 * MS)
    # when explained
    doc = json.loads(_explain(capsys, db, "--json")[1])
    # then the hog is the finding's only preemptor, named in its fix, and the agent's share is overhead
    f = next(f for f in doc["findings"] if f["kind"] == "cpu-preemption")
    assert _culprit_pids(doc) == {STRESS}
    assert "stress" in f["fix"] and "gpuscope" not in f["fix"]
    assert not any("gpuscope" in line for cause in f["causes"] for line in cause["evidence"])
    assert doc["overhead"]["preempted_ns"] == own
    assert doc["overhead"]["share"] == pytest.approx(own / (own + hog))


def test_without_a_recorded_agent_pid_a_process_named_gpuscope_is_taken_for_the_tracer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a file that predates agent_pid, whose preemptor is named gpuscope
    ev = Events(comms={100: "train", AGENT: "gpuscope"})
    _preempt(ev, steady_training(ev, 400), 4, 0, AGENT)
    db = ev.to_db(tmp_path / "t.db", agent_pid=None)
    end_session(db, 4 * S + 100 * MS)
    # when explained
    doc = json.loads(_explain(capsys, db, "--json")[1])
    # then it is still overhead, and the report says how the tracer was recognised
    assert AGENT not in _culprit_pids(doc)
    assert doc["overhead"]["tracer_pids"] == [AGENT] and doc["overhead"]["tracer_pids_from"] == "comm"


def test_a_recording_without_tracer_preemption_reports_zero_overhead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = Events(comms={100: "train", STRESS: "stress"})
    _preempt(ev, steady_training(ev, 400), 4, 0, STRESS)
    db = ev.to_db(tmp_path / "t.db", agent_pid=AGENT)
    end_session(db, 4 * S + 100 * MS)
    doc = json.loads(_explain(capsys, db, "--json")[1])
    _, text = _explain(capsys, db)
    assert doc["overhead"]["preempted_ns"] == 0 and doc["overhead"]["tracer_pids"] == [AGENT]
    assert _culprit_pids(doc) == {STRESS}
    assert "tracer overhead" not in text.lower()


def test_the_tracer_in_another_cgroup_is_no_noisy_neighbour() -> None:
    # given syncs preempted by the agent running in a cgroup of its own (a service unit, another container)
    ev = Events(comms={100: "train", AGENT: "gpuscope"})
    for i, t in enumerate(steady_training(ev, 400)):
        if i % 4 == 0:
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=AGENT, by_cgroup=4242)
    frame, window = ev.frame()
    # when analysed knowing which process is the tracer, and not knowing it
    known = analyse(frame, window, tracer=TracerIdentity(frozenset({AGENT}), "sessions"))
    unknown = analyse(frame, window)
    # then only the analysis that knows it blames neither the process nor its cgroup
    assert {"cpu-preemption", "noisy-neighbour"} <= {f.kind for f in unknown.findings}
    assert not {"cpu-preemption", "noisy-neighbour"} & {f.kind for f in known.findings}
    assert known.overhead is not None and known.overhead.preempted_ns == 100 * 5 * MS
