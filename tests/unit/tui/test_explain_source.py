"""The live view's explain source: rules over the recent rows of the database, off the builder thread."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuscope.model.ops import Op
from gpuscope.tui.explain_process import LiveExplain
from gpuscope.tui.explain_source import ExplainFindings
from gpuscope.tui.live_snapshot import LiveWindow, Preemptions
from tests.unit.analysis.builder import MS, US, Events, S, steady_training
from tests.unit.analysis.test_explain_overhead import _preempt
from tests.unit.analysis.test_rules_nccl import PIDS
from tests.unit.analysis.test_rules_nccl_hang import _hung_job

WINDOW = LiveWindow((), 10.0, Preemptions(), 0)


def _hung_db(tmp_path: Path) -> tuple[Path, int]:
    ev = Events()
    end = _hung_job(ev)
    return ev.to_db(tmp_path / "live.db"), end


def test_a_hang_is_reported_while_the_trace_runs_once_the_silence_passes_the_threshold(tmp_path: Path) -> None:
    # given a recording whose rank 2 went silent while its peers went on
    db, end = _hung_db(tmp_path)
    now = [end + 1_000 * MS]
    live = ExplainFindings(db, hang_threshold_ns=2_000 * MS, every_s=0.0, clock_ns=lambda: now[0])
    # when the silence is still below the threshold: nothing
    assert [f.kind for f in live.run_once()] == []
    # when time passes (no new rows)
    now[0] = end + 4_000 * MS
    found = live.run_once()
    # then
    assert [f.kind for f in found] == ["nccl-hang"]
    assert found[0].symptom.pid == PIDS[2]


def _hung_now(tmp_path: Path) -> Path:
    """A recording whose rank 2 has been silent for 5 s by now (CLOCK_MONOTONIC), its peers having gone on."""
    ev = Events()
    end = _hung_job(ev)
    shift = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - end - 5_000 * MS
    ev.rows = [(r[0] + shift, *r[1:]) for r in ev.rows]
    return ev.to_db(tmp_path / "live.db")


def _wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_live_explain_runs_the_rules_in_a_named_idle_process_of_its_own(tmp_path: Path) -> None:
    # given a recording with a hang, watched live
    live = LiveExplain(_hung_now(tmp_path), hang_threshold_ns=2_000 * MS, every_s=0.2)
    try:
        # when an evaluation has come back
        _wait_for(lambda: bool(live.findings(WINDOW)))
        # then its lines and counts are this process's to show, found by another process
        (line,) = live.findings(WINDOW)
        assert line.startswith("CRITICAL nccl-hang: rank 2"), line
        assert live.finding_counts() == {("nccl-hang", "CRITICAL"): 1}
        assert live.pid != os.getpid() and live.errors == 0
        # which runs only when a CPU is otherwise idle, named for `ps` and the kernel's events
        assert os.sched_getscheduler(live.pid) == os.SCHED_IDLE
        assert Path(f"/proc/{live.pid}/comm").read_text().strip() == "gpuscope-rules"
    finally:
        live.close()
    # and closing ends it cleanly
    assert live._proc.returncode == 0


def test_a_child_starved_at_the_idle_class_is_raised_to_nice_10_and_still_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    import gpuscope.tui.explain_process as explain_process

    monkeypatch.setattr(explain_process, "STARVED_S", 1.0)
    # given a live explain whose child gets no CPU (stopped: as at the idle class beside busy loops)
    live = LiveExplain(_hung_now(tmp_path), hang_threshold_ns=2_000 * MS, every_s=0.2)
    try:
        os.kill(live.pid, signal.SIGSTOP)
        # when it has said nothing for longer than STARVED_S
        _wait_for(lambda: live.raised)
        # then each of its threads runs in the normal class at nice 10, no longer only when a CPU is idle
        for tid in os.listdir(f"/proc/{live.pid}/task"):
            assert os.sched_getscheduler(int(tid)) == os.SCHED_OTHER
            assert os.getpriority(os.PRIO_PROCESS, int(tid)) == explain_process.STARVED_NICE
        # and once it runs, its findings come
        os.kill(live.pid, signal.SIGCONT)
        _wait_for(lambda: bool(live.findings(WINDOW)))
        assert live.findings(WINDOW)[0].startswith("CRITICAL nccl-hang")
    finally:
        os.kill(live.pid, signal.SIGCONT)
        live.close()
    assert live._proc.returncode == 0


def test_closing_a_child_that_gets_no_cpu_raises_it_then_ends_it_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    import gpuscope.tui.explain_process as explain_process

    monkeypatch.setattr(explain_process, "CLOSE_TIMEOUT_S", 0.5)
    # given a live explain whose child gets no CPU (stopped: as at the idle class beside busy loops), not yet
    # raised for starving
    live = LiveExplain(_hung_now(tmp_path), hang_threshold_ns=2_000 * MS, every_s=0.2)
    _wait_for(lambda: bool(live.findings(WINDOW)))
    os.kill(live.pid, signal.SIGSTOP)
    assert not live.raised
    # when the trace closes it
    live.close()
    # then it was moved out of the idle class (at the idle class a starved child never runs to see its stdin
    # close), and, still not ending, killed after the bound: a reader, it holds nothing a kill loses
    assert live.raised
    assert live._proc.returncode == -signal.SIGKILL


def test_a_failing_evaluation_is_counted_and_the_next_one_still_runs(tmp_path: Path) -> None:
    # given a "recording" that is not a database
    bad = tmp_path / "live.db"
    bad.write_bytes(b"not a database" * 100)
    live = LiveExplain(bad, every_s=0.1)
    try:
        # when two evaluations have failed
        _wait_for(lambda: live.errors >= 2)
        # then each is counted with its reason, no lines are made up, and the child lives on
        assert live.last_error is not None and "DatabaseError" in live.last_error
        assert list(live.findings(WINDOW)) == [] and live._proc.poll() is None
    finally:
        live.close()
    assert bad.read_bytes() == b"not a database" * 100  # and the file is left as it was


def test_rows_are_read_incrementally_and_only_the_horizon_is_kept(tmp_path: Path) -> None:
    db, end = _hung_db(tmp_path)
    live = ExplainFindings(
        db, hang_threshold_ns=2_000 * MS, horizon_s=1.0, every_s=0.0, clock_ns=lambda: end + 500 * MS
    )
    live.run_once()
    n_before = len(live._cols[0])
    # rank 2 comes back: a new row after the first look
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
        "bytes, handle, stream, arg0, arg1) VALUES (1, ?, ?, ?, ?, 1, 7, 128, 0, 0, 0, 194, 0, 1024, 0)",
        (end + 400 * MS, 100 * US, PIDS[2], PIDS[2]),
    )
    conn.commit()
    conn.close()
    live.run_once()
    assert len(live._cols[0]) == n_before + 1
    assert int(live._cols[0].min()) >= end + 500 * MS - 1_000 * MS - 1 * MS  # older rows dropped


def test_a_backlog_larger_than_the_cap_is_skipped_and_the_buffer_starts_afresh(tmp_path: Path) -> None:
    db, end = _hung_db(tmp_path)
    live = ExplainFindings(
        db, hang_threshold_ns=2_000 * MS, every_s=0.0, max_rows=100, clock_ns=lambda: end + 10_000 * MS
    )
    found = live.run_once()
    assert len(live._cols[0]) == 100 and live.skipped_rows > 0
    # the newest rows alone: no init calls, rank 2 absent from them, so no claim about it
    assert [f for f in found if f.kind == "nccl-hang" and f.symptom.pid == PIDS[2]] == []


def test_a_hung_rank_is_named_by_the_rank_the_recording_holds_for_it(tmp_path: Path) -> None:
    # given a hung job whose communicator inits are not in the rows, and whose ranks the processes table holds
    ev = Events()
    end = _hung_job(ev)
    ev.rows = [r for r in ev.rows if r[4] != int(Op.ncclCommInitRank)]
    db = ev.to_db(tmp_path / "live.db")
    conn = sqlite3.connect(db)
    conn.executemany("UPDATE processes SET rank = ? WHERE pid = ?", [(r, pid) for r, pid in PIDS.items()])
    conn.commit()
    conn.close()
    live = ExplainFindings(db, hang_threshold_ns=2_000 * MS, every_s=0.0, clock_ns=lambda: end + 10_000 * MS)
    # when
    found = live.run_once()
    # then
    assert [(f.kind, f.symptom.pid, f.symptom.extra["rank"]) for f in found] == [("nccl-hang", PIDS[2], 2)]


def test_the_live_rules_never_blame_the_tracer_for_preempting_traced_threads(tmp_path: Path) -> None:
    # given syncs slowed by this very process (the tracer, in the live view) taking their CPU
    me = os.getpid()
    ev = Events(comms={100: "train", me: "gpuscope"})
    _preempt(ev, steady_training(ev, 400), 4, 0, me)
    db = ev.to_db(tmp_path / "live.db")
    live = ExplainFindings(db, every_s=0.0, clock_ns=lambda: 4 * S + 100 * MS)
    # when the live rules run
    found = live.run_once()
    # then no finding names the tracer as a cause
    culprits = {c.pid for f in found for cause in f.causes for c in cause.culprits}
    assert me not in culprits
    assert "cpu-preemption" not in [f.kind for f in found]


def test_evaluations_are_spaced_so_they_use_at_most_their_share_of_a_cpu(tmp_path: Path) -> None:
    # given a live source allowed 1 % of a CPU
    live = ExplainFindings(tmp_path / "live.db", every_s=0.0, cpu_share=0.01)
    # then after an evaluation that burned 50 ms of CPU, the next one is due no sooner than 5 s later
    assert live.next_interval(0.05) == 0.05 / 0.01
    # and a cheap evaluation leaves the interval at every_s
    assert live.next_interval(0.0) == 0.0
    assert ExplainFindings(tmp_path / "live.db", every_s=3.0).next_interval(0.01) == 3.0
