"""Host-bound shapes of a real Python training loop, each found by its own rule and its code named.

tests/workloads/py_host_shapes.py feeds the stand-in libcudart through
ctypes in three shapes: 400 tiny kernels a step with Python between them
(launch-bound), a second thread running Python while the main thread feeds
the GPU (gil-bound), and a synchronisation every step followed by Python with
nothing queued (sync-in-loop). The samples of the on-CPU sampler name the
Python function each time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import StandinLibs, TraceRun, run_gpuscope
from tests.privileged.support import json_line

WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "py_host_shapes.py"
HOST_RULES = {"data-starvation", "launch-bound", "gil-bound", "sync-in-loop"}


def _explain(trace_command, standin: StandinLibs, shape: str, latency: str = "") -> tuple[int, list[dict]]:
    env = standin.env()
    if latency:
        env["GPUSCOPE_STANDIN_LATENCY"] = latency
    run: TraceRun = trace_command(
        [sys.executable, str(WORKLOAD), shape, str(standin.cudart), "6"], env=env, extra=["--no-tui"]
    )
    assert run.returncode == 0, run.stderr
    pid = int(json_line(run.stdout)["pid"])
    p = run_gpuscope("explain", "--db", str(run.db), "--json")
    assert p.returncode == 0, p.stderr
    return pid, [f for f in json.loads(p.stdout)["findings"] if f["symptom"]["pid"] == pid]


def _host_cause(finding: dict) -> dict:
    (cause,) = [c for c in finding["causes"] if c["kind"] == "host-time"]
    return cause


def test_tiny_kernels_with_python_between_them_are_launch_bound(trace_command, standin) -> None:
    _, findings = _explain(trace_command, standin, "launch")
    (f,) = [f for f in findings if f["kind"] == "launch-bound"]
    # 400 launches a step (read from a sample of the rows on a long run, so an estimate, and said so), tens of
    # microseconds of host time before each
    per_step = f["causes"][0]["effect"]["launches_per_step"]
    assert 250 <= per_step <= 550, per_step
    assert per_step == 400 or "estimated" in f["causes"][0]["evidence"][0]
    assert f["causes"][0]["effect"]["per_launch_ns"] >= 5_000
    assert "CUDA Graph" in f["fix"] and "`add_bias` (py_host_shapes.py:" in f["fix"]
    assert "`add_bias` (py_host_shapes.py:" in _host_cause(f)["evidence"][0]
    # and the host time before the launches is not called starvation
    assert {x["kind"] for x in findings} & HOST_RULES == {"launch-bound"}


def test_a_python_thread_holding_the_gil_is_gil_bound_and_named(trace_command, standin) -> None:
    _, findings = _explain(trace_command, standin, "gil")
    (f,) = [f for f in findings if f["kind"] == "gil-bound"]
    assert "`tokenize` (py_host_shapes.py:" in f["causes"][0]["evidence"][1]
    assert "`tokenize` (py_host_shapes.py:" in f["fix"] and "process" in f["fix"]
    assert not {x["kind"] for x in findings} & {"data-starvation", "launch-bound"}


def test_a_sync_every_step_then_python_is_sync_in_loop_not_starvation(trace_command, standin) -> None:
    # given a 15 ms wait on the GPU every step, then ~15 ms of Python with nothing queued
    _, findings = _explain(trace_command, standin, "sync", "cudaStreamSynchronize=15ms:sleep")
    (f,) = [f for f in findings if f["kind"] == "sync-in-loop"]
    assert f["symptom"]["op"] == "cudaStreamSynchronize"
    assert "`log_metrics` (py_host_shapes.py:" in _host_cause(f)["evidence"][0]
    assert ".item()" in f["fix"]
    # and neither the GPU alone (sync-stall) nor the host alone (data-starvation) is blamed
    kinds = {x["kind"] for x in findings}
    assert "sync-stall" not in kinds and "data-starvation" not in kinds, kinds


def test_a_gil_holder_preempted_by_cpu_hogs_still_holds_the_gil(trace_command, standin) -> None:
    """Beside two hogs the holder runs about half the time the feeding thread waits; preempted, it keeps the GIL."""
    from tests.privileged.support import cpu0_hogs

    with cpu0_hogs(2):
        _, findings = _explain(trace_command, standin, "gil")
    (f,) = [f for f in findings if f["kind"] == "gil-bound"]
    assert "`tokenize` (py_host_shapes.py:" in f["fix"]
    assert f["causes"][0]["effect"]["holder_on_cpu"] >= 0.5


@pytest.mark.parametrize("shape", ["launch", "sync"])
def test_the_host_rules_hold_beside_cpu_hogs(trace_command, standin, shape: str) -> None:
    """On a contended machine the shape is still named, or contention is, never a wrong host-bound cause."""
    from tests.privileged.support import cpu0_hogs

    with cpu0_hogs(2):
        _, findings = _explain(
            trace_command, standin, shape, "cudaStreamSynchronize=15ms:sleep" if shape == "sync" else ""
        )
    kinds = {x["kind"] for x in findings}
    expected = {"launch": "launch-bound", "sync": "sync-in-loop"}[shape]
    assert expected in kinds or "cpu-preemption" in kinds, kinds
    assert not (kinds & HOST_RULES) - {expected}, kinds
