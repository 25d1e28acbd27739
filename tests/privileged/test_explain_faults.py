"""Fault injection on the stand-in CUDA libraries, traced by the real tracer: explain names the cause.

Each test runs a workload from tests/workloads/explain_scenarios.c under
`gpuscope trace`, then analyses the recording with `explain` and checks the
top finding's kind. The whole module runs in well under a minute on 2 CPUs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, Report, explain_db
from gpuscope.model.findings import Severity

# Workloads other than the preemption one run SCHED_FIFO: on a shared, busy machine other tasks
# would preempt them for real, and explain would (rightly) report it.
RT = ["chrt", "-f", "1"]


def _explain(db: Path) -> Report:
    return explain_db(db, ExplainOptions())


def _kinds(report: Report) -> list[str]:
    return [f.kind for f in report.findings]


@pytest.fixture
def cpu0_hogs() -> Iterator[list[int]]:
    """Two busy loops pinned to CPU 0 (the workload is pinned there too); stopped by pid afterwards."""
    procs = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)


def test_cpu_hogs_on_the_workloads_cpu_are_named_as_cpu_preemption(build_workload, trace_command, standin, cpu0_hogs):
    # given a spinning synchronize (2 ms) sharing CPU 0 with two busy loops
    exe = build_workload("explain_scenarios.c")
    run = trace_command(["taskset", "-c", "0", str(exe), "sync", "150"], env=standin.env(cudaStreamSynchronize="2ms"))
    assert run.returncode == 0, run.stderr
    # when
    report = _explain(run.db)
    # then
    top = report.findings[0]
    assert top.kind == "cpu-preemption", _kinds(report)
    assert top.severity >= Severity.HIGH
    cause = top.causes[0]
    assert cause.effect is not None and cause.effect.p50_ratio >= 1.5
    assert {c.pid for c in cause.culprits} & set(cpu0_hogs)


def test_voluntary_sleeps_between_and_inside_syncs_are_not_cpu_preemption(build_workload, trace_command, standin):
    exe = build_workload("explain_scenarios.c")
    run = trace_command([*RT, str(exe), "sync", "150", "2000"], env=standin.env(cudaStreamSynchronize="1ms:sleep"))
    assert run.returncode == 0, run.stderr
    report = _explain(run.db)
    assert "cpu-preemption" not in _kinds(report)
    # the GPU idles while the thread sleeps: that is starvation, correctly not contention
    assert _kinds(report)[0] == "data-starvation", _kinds(report)


def test_a_clean_workload_has_no_high_or_critical_finding(build_workload, trace_command):
    run = trace_command([*RT, str(build_workload("cuda_calls.c")), "300", "2"])
    assert run.returncode == 0, run.stderr
    report = _explain(run.db)
    assert all(f.severity < Severity.HIGH for f in report.findings), [(f.kind, f.severity) for f in report.findings]


def test_two_processes_sharing_the_stand_in_gpu_are_gpu_contention(build_workload, trace_command, standin, tmp_path):
    exe = build_workload("explain_scenarios.c")
    shared = tmp_path / "gpu"
    script = f"{exe} contend 150 {shared} & {exe} contend 150 {shared}; wait"
    run = trace_command([*RT, "sh", "-c", script], env=standin.env())
    assert run.returncode == 0, run.stderr
    report = _explain(run.db)
    assert report.findings and report.findings[0].kind == "gpu-contention", _kinds(report)


def test_slow_first_calls_are_cold_start(build_workload, trace_command):
    run = trace_command([*RT, str(build_workload("explain_scenarios.c")), "cold", "200"])
    assert run.returncode == 0, run.stderr
    report = _explain(run.db)
    top = report.findings[0]
    assert top.kind == "cold-start", _kinds(report)
    assert top.causes[0].metrics["kernels"] == 4
    assert "cpu-preemption" not in _kinds(report)


def test_copies_dominating_the_step_are_memcpy_bound(build_workload, trace_command, standin):
    exe = build_workload("explain_scenarios.c")
    run = trace_command([*RT, str(exe), "memcpy", "150"], env=standin.env(cudaMemcpy="1ms"))
    assert run.returncode == 0, run.stderr
    assert _kinds(_explain(run.db))[0] == "memcpy-bound"


def test_periodic_malloc_spikes_are_allocator_churn(build_workload, trace_command):
    run = trace_command([*RT, str(build_workload("explain_scenarios.c")), "churn", "120"])
    assert run.returncode == 0, run.stderr
    report = _explain(run.db)
    assert _kinds(report)[0] == "allocator-churn", _kinds(report)


def test_allocations_without_frees_are_a_memory_leak(build_workload, trace_command):
    run = trace_command([*RT, str(build_workload("explain_scenarios.c")), "leak", "200"])
    assert run.returncode == 0, run.stderr
    assert "memory-leak" in _kinds(_explain(run.db))


def test_explain_cli_prints_json_for_a_real_recording(build_workload, trace_command, tmp_path):
    run = trace_command([*RT, str(build_workload("explain_scenarios.c")), "leak", "100"])
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "explain", "--db", str(run.db), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ),
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["findings"][0]["kind"] == "memory-leak"
    assert doc["stored"] is False  # explain writes findings only with --save-findings


def test_a_cuda_thread_waiting_for_its_loader_thread_is_data_starvation(build_workload, trace_command):
    # given quick GPU steps and a loader thread that spends 5 ms of CPU on each batch before handing it over
    run = trace_command([str(build_workload("cuda_feeder.c")), "100", "5000"])
    assert run.returncode == 0, run.stderr
    # then the recorded wakeups show who fed the CUDA thread, and the gaps are starvation
    f = next(f for f in _explain(run.db).findings if f.kind == "data-starvation")
    metrics = f.causes[0].metrics
    assert metrics["fed_gaps"] >= 0.9 * metrics["gaps"] >= 80, metrics
    assert metrics["on_cpu_share"] < 0.5
    assert "woke it" in f.causes[0].evidence[1]
