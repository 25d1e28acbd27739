"""`gpuscope explain` says what a recording lost: drops by source and window, and caveats on the numbers they touch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analysis.caveats import with_caveats
from gpuscope.analysis.recording_state import RecordingState, SourceDrops
from gpuscope.cli import main
from gpuscope.model.drops import drop_advice
from gpuscope.model.findings import Finding, Severity, Symptom
from gpuscope.model.ops import Op

from .builder import MS, US, WALL0, Events, S, end_session, log_drops, steady_training

RECORDED = 2_000  # what end_session says the agent received (the rows below are about that many)


def _preempted(ev: Events) -> None:
    """Every 4th sync 5 ms longer while pid 999 had the CPU: a cpu-preemption finding for pid 100."""
    for i, t in enumerate(steady_training(ev, 400)):
        if i % 4 == 0:
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=999)


def _copies(ev: Events) -> None:
    """Copies taking 60 % of the wall time: a memcpy-bound finding, read from CUDA events only."""
    for i in range(200):
        ev.add(Op.cudaLaunchKernel, i * MS, 5 * US)
        ev.add(Op.cudaMemcpy, i * MS + 10 * US, 600 * US, nbytes=1 << 20, arg0=1)


def _db(tmp_path: Path, build: Any, drops: dict[int, dict[str, int]], *, logged: bool = True) -> Path:
    """A closed recording whose agent counted ``drops`` ({second: {source: n}}), logged per second or not."""
    ev = Events(comms={100: "train", 999: "stress"})
    build(ev)
    db = ev.to_db(tmp_path / "t.db")
    totals: dict[str, int] = {}
    for by_source in drops.values():
        for source, n in by_source.items():
            totals[f"drop_{source}"] = totals.get(f"drop_{source}", 0) + n
    if logged:
        log_drops(db, drops)
    end_session(db, 4 * S + 100 * MS, recorded=RECORDED, drops=totals)
    return db


def _explain(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str]:
    rc = main(["explain", "--db", str(db), *argv])
    return rc, capsys.readouterr().out


def _finding(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(f for f in doc["findings"] if f["kind"] == kind)


def test_json_reports_the_drops_of_each_source_with_the_seconds_they_fall_in_and_the_share_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording that lost 300 CUDA events in its second second and 50 host events in its third
    db = _db(tmp_path, _preempted, {1 * S: {"cuda": 300}, 2 * S: {"host": 50}})
    # when it is explained as JSON
    rc, out = _explain(capsys, db, "--json")
    rec = json.loads(out)["recording"]
    # then the recording section counts them by source, places them in time and gives the share of calls lost
    assert rc == 0
    by_source = {d["source"]: d for d in rec["drops"]}
    assert set(by_source) == {"cuda", "host"}
    cuda = by_source["cuda"]
    assert (cuda["dropped"], cuda["from_wall_ns"], cuda["to_wall_ns"]) == (300, WALL0 + 1 * S, WALL0 + 2 * S)
    assert cuda["from"].startswith("2023-11-14T22:13:21")
    assert by_source["host"]["dropped"] == 50
    assert rec["events_dropped"] == 350 and rec["events_recorded"] == RECORDED
    assert rec["lost_share"] == pytest.approx(350 / (RECORDED + 350), abs=1e-4)


def test_a_finding_over_a_window_that_lost_events_of_its_sources_carries_a_lower_bound_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given CUDA and host events lost while pid 100's syncs were preempted
    db = _db(tmp_path, _preempted, {1 * S: {"cuda": 300}, 2 * S: {"host": 50}})
    # when explained, as JSON and as text
    doc = json.loads(_explain(capsys, db, "--json")[1])
    _, text = _explain(capsys, db)
    # then the preemption finding (host cause, CUDA symptom) says both of its counts are lower bounds
    caveats = {c["source"]: c for c in _finding(doc, "cpu-preemption")["caveats"]}
    assert {s: c["dropped"] for s, c in caveats.items()} == {"cuda": 300, "host": 50}
    assert all(c["kind"] == "lower-bound" for c in caveats.values())
    assert "lower bound" in caveats["cuda"]["text"] and "300 cuda events" in caveats["cuda"]["text"]
    assert f"caveat: {caveats['cuda']['text']}" in text
    # and the window-wide numbers (stats, event count) carry the same caveats
    assert {c["source"] for c in doc["caveats"]} == {"cuda", "host"}


def test_drops_outside_the_analysed_window_leave_its_findings_without_caveats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given drops only in the recording's first second
    db = _db(tmp_path, _preempted, {0: {"cuda": 300, "host": 50}})
    # when the last two seconds are explained
    doc = json.loads(_explain(capsys, db, "--json", "--from", "2s")[1])
    # then the finding there is complete, though the recording still lists what it lost elsewhere
    assert _finding(doc, "cpu-preemption")["caveats"] == []
    assert doc["caveats"] == []
    assert {d["source"]: d["dropped"] for d in doc["recording"]["drops"]} == {"cuda": 300, "host": 50}


def test_host_drops_do_not_caveat_a_finding_read_from_cuda_events_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host_only = _db(tmp_path, _copies, {0: {"host": 40}})
    assert _finding(json.loads(_explain(capsys, host_only, "--json")[1]), "memcpy-bound")["caveats"] == []
    (tmp_path / "t.db").unlink()
    cuda = _db(tmp_path, _copies, {0: {"cuda": 40}})
    caveats = _finding(json.loads(_explain(capsys, cuda, "--json")[1]), "memcpy-bound")["caveats"]
    assert [(c["source"], c["dropped"]) for c in caveats] == [("cuda", 40)]


def test_drops_the_file_does_not_place_in_time_are_counted_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording that counted drops but logged no second for them (as files before drop_log)
    db = _db(tmp_path, _preempted, {0: {"cuda": 300}}, logged=False)
    # when explained
    doc = json.loads(_explain(capsys, db, "--json")[1])
    # then the finding's caveat counts them as lost at times not recorded, in the session it overlaps
    (caveat,) = _finding(doc, "cpu-preemption")["caveats"]
    assert (caveat["source"], caveat["dropped"], caveat["unlocated"]) == ("cuda", 0, 300)
    assert "times not recorded" in caveat["text"]
    (cuda,) = doc["recording"]["drops"]
    assert cuda["dropped"] == 300 and cuda["from_wall_ns"] is None


def test_the_text_report_says_what_was_lost_and_the_measured_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path, _preempted, {1 * S: {"cuda": 300}})
    rc, text = _explain(capsys, db)
    doc = json.loads(_explain(capsys, db, "--json")[1])
    advice = drop_advice({})  # the session records no flags: the advice for a default ring
    assert rc == 0
    assert "300 events dropped" in text and "cuda 300" in text
    assert f"fix: {advice}" in text
    assert doc["recording"]["advice"] == advice


def test_a_complete_recording_reports_no_drops_and_no_caveats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path, _preempted, {})
    doc = json.loads(_explain(capsys, db, "--json")[1])
    _, text = _explain(capsys, db)
    assert doc["recording"]["drops"] == [] and doc["recording"]["lost_share"] == 0
    assert doc["recording"]["advice"] is None
    assert all(f["caveats"] == [] for f in doc["findings"])
    assert "dropped" not in text and "caveat" not in text


def test_dropped_call_stacks_caveat_call_sites_only() -> None:
    # given a window that lost 7 call stacks and no event, and two findings, one naming call sites
    state = RecordingState((), (SourceDrops("stack", 7, in_window=7),))
    plain = Finding(
        rule="allocator-churn",
        kind="allocator-churn",
        severity=Severity.MEDIUM,
        symptom=Symptom("spikes", "cudaMalloc", 100),
        causes=(),
        fix="",
    )
    sited = Finding(
        rule="allocator-churn",
        kind="allocator-churn",
        severity=Severity.MEDIUM,
        symptom=Symptom("spikes", "cudaMalloc", 100, extra={"call_sites": "90% from grow (kv.py:12)"}),
        causes=(),
        fix="",
    )
    # when caveats are attached
    out = with_caveats((plain, sited), state)
    # then only the finding with call sites is told they come from a partial sample
    assert out[0].caveats == ()
    (c,) = out[1].caveats
    assert (c.source, c.dropped) == ("stack", 7) and "call sites" in c.text
