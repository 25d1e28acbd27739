"""launch-bound, gil-bound and sync-in-loop on constructed loops, with constructed on-CPU samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuscope.analysis.cpu_profile import CpuSamples, host_fix, hot_functions
from gpuscope.analysis.engine import ExplainOptions, Report, analyse, explain_db
from gpuscope.demo import REGISTRY, DemoMode, DemoRunner
from gpuscope.model.ops import Op
from gpuscope.stacks.frames import Frame

from .builder import MS, US, Events

HOST_RULES = ("launch-bound", "gil-bound", "sync-in-loop")


def _samples(points: list[tuple[int, int, int, tuple[Frame, ...]]], hz: int = 49) -> CpuSamples:
    """Samples at (ts, pid, tid) running a stack."""
    stacks = list(dict.fromkeys(p[3] for p in points))
    return CpuSamples(
        np.array([p[0] for p in points], dtype=np.int64),
        np.array([p[1] for p in points], dtype=np.int64),
        np.array([p[2] for p in points], dtype=np.int64),
        np.array([stacks.index(p[3]) for p in points], dtype=np.int64),
        tuple(stacks),
        hz,
    )


def _py(*names: str, file: str = "/srv/train.py") -> tuple[Frame, ...]:
    return tuple(Frame("python", n, file=file, line=10 + i) for i, n in enumerate(names))


def _report(ev: Events, samples: CpuSamples | None = None) -> Report:
    frame, window = ev.frame()
    return analyse(frame, window, cpu_samples=samples)


def _launch_loop(ev: Events, steps: int, per_step: int, gap: int, sync: int = 20 * US) -> list[tuple[int, int]]:
    """Steps of ``per_step`` launches ``gap`` ns apart, then a sync; returns each step's launch phase."""
    t, phases = 0, []
    for _ in range(steps):
        start = t
        for _ in range(per_step):
            ev.add(Op.cudaLaunchKernel, t, 1 * US, handle=0x100)
            t += gap
        ev.add(Op.cudaStreamSynchronize, t, sync)
        phases.append((start, t))
        t += sync + 5 * US
    return phases


def test_tiny_kernels_with_host_code_between_them_are_launch_bound_and_the_code_named() -> None:
    ev = Events(comms={100: "train"})
    phases = _launch_loop(ev, 40, 300, 30 * US)
    pts = [
        (s + k * 5 * MS, 100, 100, _py("add_bias", "forward")) for s, e in phases for k in range((e - s) // (5 * MS))
    ]
    (f,) = [f for f in _report(ev, _samples(pts)).findings if f.kind == "launch-bound"]
    assert f.causes[0].metrics["launches_per_step"] == 300
    assert 28 * US <= f.causes[0].metrics["per_launch_ns"] <= 31 * US
    assert "CUDA Graph" in f.fix and "`add_bias` (train.py:10)" in f.fix
    assert f.causes[1].kind == "host-time"


@pytest.mark.parametrize(("gap", "sync"), [(2 * US, 20 * US), (30 * US, 5 * MS)])
def test_back_to_back_launches_or_a_busy_gpu_are_not_launch_bound(gap: int, sync: int) -> None:
    # a C loop launching back to back (the call's own cost), or syncs that wait for real GPU work
    ev = Events()
    _launch_loop(ev, 40, 300, gap, sync)
    assert "launch-bound" not in [f.kind for f in _report(ev).findings]


def _gil_loop(ev: Events, samples: bool) -> CpuSamples | None:
    """The feeding thread (tid 100) loses the GIL to thread 101 for 5 ms after each short step."""
    t, pts = 0, []
    for i in range(200):
        ev.add(Op.cudaLaunchKernel, t, 1 * US, handle=0x100)
        ev.add(Op.cudaStreamSynchronize, t + 10 * US, 20 * US)
        wait = t + 40 * US
        ev.sched(wait, 5 * MS, preempted=False, by_pid=0)
        ev.add(Op.sched_wakeup, wait + 5 * MS - 1, 0, 100, 100, handle=(100 << 32) | 101)
        if i % 4 == 0:
            pts.append((wait + 2 * MS, 100, 101, _py("tokenize", "worker_loop", file="/srv/tok.py")))
        t = wait + 5 * MS + 100 * US
    return _samples(pts) if samples else None


def test_a_thread_holding_the_gil_is_named_as_the_feeding_threads_cause() -> None:
    ev = Events(comms={100: "serve"})
    (f,) = [f for f in _report(ev, _gil_loop(ev, True)).findings if f.kind == "gil-bound"]
    assert f.causes[0].metrics["holder_tid"] == 101
    assert "`tokenize` (tok.py:10)" in f.fix
    assert f.lost_share > 0.9


def test_without_samples_no_gil_claim_is_made() -> None:
    ev = Events()
    assert "gil-bound" not in [f.kind for f in _report(ev, _gil_loop(ev, False)).findings]


def _sync_loop(ev: Events, wait: int, host: int) -> list[tuple[int, int]]:
    t, hosts = 0, []
    for _ in range(100):
        for k in range(10):
            ev.add(Op.cudaLaunchKernel, t + k * 2 * US, 1 * US, handle=0x100)
        s = t + 25 * US
        ev.add(Op.cudaStreamSynchronize, s, wait)
        hosts.append((s + wait, s + wait + host))
        t = s + wait + host
    return hosts


def test_a_wait_every_step_then_host_work_is_sync_in_loop_with_what_overlap_saves() -> None:
    ev = Events()
    hosts = _sync_loop(ev, 10 * MS, 8 * MS)
    pts = [(s + 4 * MS, 100, 100, _py("log_metrics")) for s, _ in hosts]
    report = _report(ev, _samples(pts))
    (f,) = [f for f in report.findings if f.kind == "sync-in-loop"]
    assert f.causes[0].metrics["steps"] == 99
    assert f.lost_ns == pytest.approx(99 * 8 * MS, rel=0.01)
    assert "`log_metrics` (train.py:10)" in f.fix and ".item()" in f.fix


@pytest.mark.parametrize("preempted", [6 * MS, 9 * MS])
def test_a_sync_loop_on_a_contended_cpu_is_still_sync_in_loop_not_starvation(preempted: int) -> None:
    # given the same turns (10 ms waits, 8 ms of host work after each) on a machine where another process holds
    # the thread's CPU for part of every host turn, so the GPU idles more than half the time
    ev = Events(comms={100: "train", 999: "stress"})
    for s, _ in _sync_loop(ev, 10 * MS, 8 * MS + preempted):
        ev.sched(s + 2 * MS, preempted, preempted=True, by_pid=999)
    kinds = [f.kind for f in _report(ev).findings]
    # then the loop is still the host and the GPU taking turns: the preempted time is contention (slower host
    # work), neither sleep nor the process's own host starving its GPU
    assert "sync-in-loop" in kinds and "data-starvation" not in kinds, kinds


@pytest.mark.parametrize(("wait", "host"), [(10 * MS, 200 * US), (200 * US, 10 * MS)])
def test_a_busy_gpu_or_a_starved_one_is_not_sync_in_loop(wait: int, host: int) -> None:
    ev = Events()
    _sync_loop(ev, wait, host)
    assert "sync-in-loop" not in [f.kind for f in _report(ev).findings]


def test_the_fix_follows_the_top_function() -> None:
    def fix_for(*names: str) -> str:
        s = _samples([(i, 1, 1, _py(n, file="/usr/lib/python3/dist-packages/torch/x.py")) for i, n in enumerate(names)])
        return host_fix(hot_functions(s, np.arange(len(names))), feeder_holds_it=True)

    assert "__getitems__" in fix_for("__getitem__", "__getitem__", "default_collate")
    assert "collate" in fix_for("default_collate", "default_collate", "__getitem__")
    assert "tokenize ahead" in fix_for("encode_batch", "encode_batch")
    assert "GPU" in fix_for("resize", "resize")


def test_the_users_code_is_named_before_the_library_it_calls() -> None:
    stack = (Frame("python", "sum", file="/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py", line=1),
             Frame("python", "__getitem__", file="/srv/data.py", line=42))  # fmt: skip
    s = _samples([(0, 1, 1, stack)] * 3)
    (h,) = hot_functions(s, np.arange(3))
    assert (h.function, h.line) == ("__getitem__", 42)


@pytest.mark.parametrize("scenario", [s.name for s in REGISTRY if s.name != "dataloader-starvation"])
def test_no_host_bound_rule_fires_on_the_other_demo_scenarios(tmp_path: Path, scenario: str) -> None:
    db = tmp_path / "demo.db"
    DemoRunner(db).run(REGISTRY.get(scenario), DemoMode.SYNTHETIC)
    kinds = [f.kind for f in explain_db(db, ExplainOptions()).findings]
    assert not set(kinds) & {*HOST_RULES, "data-starvation"}, (scenario, kinds)
