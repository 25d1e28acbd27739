"""Host-cause rules on constructed event sets: overlap, not proximity; effect size or nothing."""

from __future__ import annotations

from gpuscope.model.findings import Severity
from gpuscope.model.ops import Op

from .builder import MS, US, Events, slow_syncs, steady_training


def test_preemption_inside_slow_syncs_is_reported_with_its_preemptor_and_effect() -> None:
    # given syncs that are 5 ms longer whenever pid 999 held the CPU during them
    ev = Events(comms={100: "train", 999: "stress"})
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=True, by_pid=999)
    # when
    report = ev.report()
    # then
    top = report.findings[0]
    assert top.kind == "cpu-preemption"
    assert top.severity >= Severity.HIGH
    cause = top.causes[0]
    assert cause.effect is not None and cause.effect.p50_ratio > 10
    assert cause.effect.excess_share > 0.9
    assert cause.culprits[0].pid == 999 and cause.culprits[0].comm == "stress"
    assert "stress" in top.fix


def test_preemption_by_its_own_threads_is_named_as_its_own_with_the_fix_for_its_threads() -> None:
    # given syncs slowed mostly by another thread of the same process (a Python thread beside the feeder), a little
    # by an outside task
    ev = Events(comms={100: "train", 999: "stress"})
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=True, by_pid=100)
    slow_syncs(ev, syncs[2::40], 1, 5 * MS, preempted=True, by_pid=999)
    # when
    (f,) = [f for f in ev.report().findings if f.kind == "cpu-preemption"]
    # then the process's own threads are said to be most of it, and the fix is its thread count first
    assert "of it by its own threads, not another process" in f.symptom.summary
    assert f.fix.startswith("its own threads outnumber the cores it has")
    # and the outside task is still named, as the smaller part
    assert "move `stress` (pid 999)" in f.fix


def test_voluntary_sleep_inside_calls_is_not_cpu_preemption() -> None:
    ev = Events()
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=False, by_pid=0)
    assert "cpu-preemption" not in ev.kinds()


def test_preemption_between_calls_is_not_blamed_on_them() -> None:
    # given preemption right after every sync (proximity), never inside one
    ev = Events()
    for t in steady_training(ev, 400):
        ev.sched(t + 200 * US, 300 * US, preempted=True)
    assert "cpu-preemption" not in ev.kinds()


def test_preemption_without_a_latency_effect_is_not_reported() -> None:
    # given every call equally preempted for a sliver: no difference between affected and unaffected
    ev = Events()
    for t in steady_training(ev, 400):
        ev.sched(t + 20 * US, 2 * US, preempted=True)
    assert "cpu-preemption" not in ev.kinds()


def test_preemption_by_another_cgroup_is_also_a_noisy_neighbour_ranked_below_the_mechanism() -> None:
    ev = Events(comms={999: "other-job"})
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=True, by_pid=999, by_cgroup=4242)
    kinds = ev.kinds()
    assert kinds[0] == "cpu-preemption"
    assert "noisy-neighbour" in kinds


def test_block_io_in_flight_during_slow_calls_is_reported() -> None:
    ev = Events()
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 5, 4 * MS, preempted=False, by_pid=0)
    for i, t in enumerate(syncs):
        if i % 5 == 0:
            ev.add(Op.block_io, t, 5 * MS, 100, nbytes=1 << 20, arg0=1)
    kinds = ev.kinds()
    assert kinds[0] == "block-io"
    assert "cpu-preemption" not in kinds


def test_direct_reclaim_during_slow_calls_is_memory_pressure() -> None:
    ev = Events()
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 5, 3 * MS, preempted=False, by_pid=0)
    for i, t in enumerate(syncs):
        if i % 5 == 0:
            ev.add(Op.direct_reclaim, t + 30 * US, 3 * MS, 100)
    assert ev.kinds()[0] == "memory-pressure"


def test_tcp_retransmits_inside_slow_calls_are_reported() -> None:
    ev = Events()
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 5, 3 * MS, preempted=False, by_pid=0)
    for i, t in enumerate(syncs):
        if i % 5 == 0:
            ev.add(Op.tcp_retransmit, t + 1 * MS, 0, 100)
    assert "tcp-retransmit" in ev.kinds()


def test_oom_kill_of_a_traced_process_is_critical() -> None:
    ev = Events(comms={100: "train"})
    steady_training(ev, 50)
    ev.add(Op.oom_kill, 60 * MS, 0, 1, handle=100, nbytes=8 << 30)
    top = ev.report().findings[0]
    assert (top.kind, top.severity) == ("oom", Severity.CRITICAL)
    assert top.symptom.pid == 100


def test_a_clean_workload_has_no_high_or_critical_finding() -> None:
    ev = Events()
    syncs = steady_training(ev, 1000)
    for t in syncs[::10]:
        ev.sched(t + 500 * US, 50 * US, preempted=False)  # sleeps between calls
    assert all(f.severity < Severity.HIGH for f in ev.report().findings)


def test_off_cpu_time_without_task_state_is_flagged_not_guessed() -> None:
    # given imported sched_switch rows (no preempted flag, no prev_state) inside slow calls
    ev = Events()
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=False, by_pid=999)
    ev.rows = [(*r[:10], 0) if r[4] == int(Op.sched_switch) else r for r in ev.rows]
    report = ev.report()
    assert "cpu-preemption" not in [f.kind for f in report.findings]
    assert any("cannot be told" in n for n in report.notes)


def test_off_cpu_intervals_without_task_state_are_told_apart_by_inference() -> None:
    # given imported sched_switch rows (no preempted flag, no prev_state), as the reference records them
    ev = Events()
    steady_training(ev, 50)
    stateless = {
        "io": (100 * MS, 3 * MS, 7),  # a block read of the process completes inside it
        "timer": (200 * MS, int(100.5 * MS), 7),  # a 100 ms sleep, give or take
        "idle": (400 * MS, int(3.3 * MS), 1),  # resumed from an idle CPU (cgroup 1 on the row)
        "unexplained": (450 * MS, int(3.3 * MS), 7),
    }
    for ts, dur, cgroup in stateless.values():
        ev.add(Op.sched_switch, ts, dur, cgroup=cgroup)
    ev.add(Op.block_io, 100 * MS - 100 * US, 2 * MS, nbytes=4096)
    kinds = ev.context().stateless_kinds
    got = {k: [int(ev.context().frame.ts[i]) for i in rows] for k, rows in kinds.items()}
    assert got == {k: [v[0]] for k, v in stateless.items()}


def test_ops_the_cause_touched_too_few_times_are_named_as_too_few_to_compare() -> None:
    # given slow syncs under preemption, and two launches that a preemption also covered
    ev = Events(comms={100: "train", 999: "stress"})
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=True, by_pid=999)
    for t in (syncs[10] - 10 * US, syncs[20] - 10 * US):
        ev.sched(t + 1 * US, 3 * US, preempted=True, by_pid=999)
    top = ev.report().findings[0]
    assert top.kind == "cpu-preemption"
    assert "cudaLaunchKernel: 2 calls overlapping CPU preemption, too few to compare" in top.causes[0].evidence


def test_a_process_touched_too_few_times_for_any_finding_is_named_in_a_note() -> None:
    # given a healthy job where a preemption covered two launches, and nothing else
    ev = Events(comms={100: "train", 999: "stress"})
    syncs = steady_training(ev, 400)
    for t in (syncs[10] - 10 * US, syncs[20] - 10 * US):
        ev.sched(t + 1 * US, 3 * US, preempted=True, by_pid=999)
    # when
    report = ev.report()
    # then no finding stands, and a note says which group was too small to compare
    assert "cpu-preemption" not in ev.kinds()
    notes = [n for n in report.notes if n.startswith("too few calls to compare")]
    assert notes == [
        "too few calls to compare (fewer than 3 affected), so no finding for: "
        "pid 100 cudaLaunchKernel: 2 calls overlapping CPU preemption"
    ], report.notes


def test_a_healthy_job_gets_no_too_few_to_compare_note() -> None:
    ev = Events()
    steady_training(ev, 400)
    assert not [n for n in ev.report().notes if n.startswith("too few")]
