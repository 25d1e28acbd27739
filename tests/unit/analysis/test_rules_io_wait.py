"""blocking-io: the GPU process's own thread waiting on block I/O, with or without CUDA calls in the waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.model.findings import Severity
from gpuscope.model.ops import Op
from tests.ingero_fixtures import ingero_fixture

from .builder import MS, US, Events

TRAINER, WORKER = 100, 101


def _loop(read_tid: int, read_us: int, steps: int = 100) -> Events:
    """Steps of 10 ms: launch, 2 ms sync, then ``read_us`` of synchronous read by ``read_tid`` (blocked)."""
    ev = Events()
    for i in range(steps):
        t = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, t, 5 * US, TRAINER, TRAINER)
        ev.add(Op.cudaStreamSynchronize, t + 10 * US, 2 * MS, TRAINER, TRAINER)
        r = t + 2200 * US
        ev.add(Op.block_io, r, read_us * US, TRAINER, read_tid, nbytes=1 << 20)
        ev.sched(r + 5 * US, read_us * US, pid=TRAINER, tid=read_tid, preempted=False)
    return ev


def test_reads_on_the_cuda_thread_between_steps_are_blocking_io() -> None:
    # given the thread that makes the CUDA calls blocked 6 ms of every 10 ms step in its own reads
    f = next(f for f in _loop(TRAINER, 6000).report().findings if f.kind == "blocking-io")
    # then the share is its wait against the process's active time, and it is what the step lost
    assert f.symptom.pid == TRAINER and f.symptom.count == 100
    assert f.causes[0].metrics["wait_ns"] == 100 * (6 * MS - 5 * US)
    assert 0.55 < f.causes[0].metrics["share"] < 0.65
    assert f.severity >= Severity.HIGH
    assert "num_workers" in f.fix


def test_reads_on_a_worker_thread_while_the_cuda_thread_runs_are_not_blocking_io() -> None:
    assert "blocking-io" not in _loop(WORKER, 6000).kinds()


def test_short_reads_are_not_blocking_io() -> None:
    # 0.5 ms of 10 ms: under a tenth of the time
    assert "blocking-io" not in _loop(TRAINER, 500).kinds()


def test_preemption_during_io_is_not_a_wait_for_it() -> None:
    ev = Events()
    for i in range(100):
        t = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
        ev.add(Op.block_io, t + 100 * US, 6 * MS, nbytes=4096)
        ev.sched(t + 200 * US, 6 * MS, preempted=True)
    assert "blocking-io" not in ev.kinds()


@pytest.fixture(scope="module")
def node_01(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingero_fixture("sample-gpu-node-01.db")


def test_the_reference_recording_whose_cuda_process_waits_on_reads_gets_the_finding(node_01: Path) -> None:
    # a reference recording: python3 off-CPU in block reads, no CUDA rows in the sample, no task states
    report = explain_db(node_01, ExplainOptions())
    top = report.findings[0]
    assert top.kind == "blocking-io" and top.symptom.comm == "python3"
    assert top.causes[0].metrics["share"] > 0.4
    # the reference's own agent (its writes) is not the finding's process
    assert {f.symptom.pid for f in report.findings if f.kind == "blocking-io"} == {top.symptom.pid}
