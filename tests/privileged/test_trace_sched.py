"""Scheduler events of a traced worker thread: preemption by CPU hogs, and voluntary sleeps."""

from __future__ import annotations

import os

import pytest

from tests.privileged.support import cpu0_hogs, ids_from

MS = 1_000_000

needs_cpu0 = pytest.mark.skipif(0 not in os.sched_getaffinity(0), reason="CPU 0 is not available to this process")


@needs_cpu0
def test_a_spinning_worker_thread_preempted_by_cpu_hogs_records_who_took_its_cpu(
    build_workload, trace_command, standin
):
    # given 3 busy loops pinned to CPU 0
    exe = build_workload("cuda_sched.c")
    with cpu0_hogs(3) as hogs:
        # when a worker thread pinned to CPU 0 spins 30 x 20 ms in cudaStreamSynchronize
        run = trace_command([str(exe), "30"], env=standin.env(cudaStreamSynchronize="20ms"))
    # then
    assert run.returncode == 0, run.stderr
    pid, (tid,) = ids_from(run.stdout)
    assert tid != pid
    assert run.op_counts()["cudaStreamSynchronize"] == 30
    # the worker thread itself (not only the main thread) was switched out while runnable, by the hogs
    rows = run.query("SELECT preempted, prev_state, by_pid, off_cpu_ns FROM sched_switches WHERE tid = ?", (tid,))
    preempted = [r for r in rows if r[0] == 1]
    assert len(preempted) >= 10, rows
    # (other processes on the machine may take CPU 0 too, so only a floor is asserted)
    by_hogs = [r for r in preempted if r[2] in hogs]
    assert len(by_hogs) >= 3, (hogs, preempted)
    assert pid not in {r[2] for r in preempted}
    assert all(prev_state == 0 and off_cpu > 0 for _, prev_state, _, off_cpu in preempted), preempted
    # and the record flag agrees with the view's column
    flagged = run.query("SELECT count(*) FROM events WHERE op = 'sched_switch' AND tid = ? AND flags & 2", (tid,))
    assert flagged == [(len(preempted),)]
    # and the rows are the worker's own: pid is the process, comm its name
    assert run.query("SELECT DISTINCT pid FROM sched_switches WHERE tid = ?", (tid,)) == [(pid,)]


@needs_cpu0
def test_a_worker_thread_that_sleeps_is_recorded_as_switching_out_voluntarily(build_workload, trace_command, standin):
    # given no competition for the CPU
    exe = build_workload("cuda_sched.c")
    # when a worker thread sleeps 50 x 5 ms inside cudaStreamSynchronize
    run = trace_command([str(exe), "50"], env=standin.env(cudaStreamSynchronize="5ms:sleep"))
    # then
    assert run.returncode == 0, run.stderr
    pid, (tid,) = ids_from(run.stdout)
    assert tid != pid
    rows = run.query("SELECT preempted, prev_state, off_cpu_ns FROM sched_switches WHERE tid = ?", (tid,))
    # every sleep is one voluntary switch (sleeping state) lasting the sleep: most of its 5 ms (the thread can
    # reach its nanosleep late: one sync in about five runs spent 0.49 ms on-CPU first, off-CPU 4.67 ms)
    sleeps = [r for r in rows if r[2] >= 4 * MS]
    assert 50 <= len(sleeps) <= 52, rows
    assert all(preempted == 0 and prev_state != 0 for preempted, prev_state, _ in sleeps), sleeps
    # and the sleeps fall inside the synchronize calls of that thread
    inside = run.query(
        "SELECT count(*) FROM sched_switches s JOIN events c ON c.op = 'cudaStreamSynchronize' AND c.tid = s.tid "
        "AND s.ts_ns >= c.ts_ns AND s.ts_ns + s.off_cpu_ns <= c.ts_ns + c.duration_ns "
        "WHERE s.tid = ? AND s.off_cpu_ns >= ?",
        (tid, 4 * MS),
    )
    assert inside[0][0] >= 50
