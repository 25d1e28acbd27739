"""GPU-side and flow rules, with the boundaries of their thresholds."""

from __future__ import annotations

import pytest

from gpuscope.model.findings import Severity
from gpuscope.model.ops import Op

from .builder import MS, US, Events


@pytest.mark.parametrize(("ratio", "reported"), [(100, True), (11, True), (9, False)])
def test_cold_first_call_is_reported_from_ten_times_steady_state(ratio: int, reported: bool) -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaMalloc, i * MS, (ratio if i == 0 else 1) * 200 * US)
    assert ("cold-start" in ev.kinds()) is reported


def test_first_launch_of_each_kernel_is_cold_start_not_a_tail() -> None:
    # given 5 kernels whose first launch each takes 20 ms (lazy module load)
    ev = Events()
    for i in range(500):
        k = 0x1000 + i % 5
        ev.add(Op.cudaLaunchKernel, i * MS, 20 * MS if i < 5 else 5 * US, handle=k)
    report = ev.report()
    kinds = [f.kind for f in report.findings]
    assert kinds[0] == "cold-start"
    assert report.findings[0].causes[0].metrics["kernels"] == 5


@pytest.mark.parametrize(("copy_us", "reported"), [(600, True), (350, True), (250, False)])
def test_memcpy_bound_from_thirty_percent_of_wall_time(copy_us: int, reported: bool) -> None:
    ev = Events()
    for i in range(200):
        ev.add(Op.cudaLaunchKernel, i * MS, 5 * US)
        ev.add(Op.cudaMemcpy, i * MS + 10 * US, copy_us * US, nbytes=1 << 20, arg0=1)
    assert ("memcpy-bound" in ev.kinds()) is reported


def test_periodic_malloc_spikes_are_allocator_churn() -> None:
    ev = Events()
    for i in range(300):
        ev.add(Op.cudaMalloc, i * MS, 20 * MS if i % 50 == 25 else 10 * US, handle=i)
        ev.add(Op.cudaFree, i * MS + 500 * US, 5 * US, handle=i)
    f = next(f for f in ev.report().findings if f.kind == "allocator-churn")
    assert f.causes[0].metrics["spikes"] == 6
    assert f.causes[0].metrics["period_cv"] < 0.1


def test_two_malloc_spikes_are_not_churn() -> None:
    ev = Events()
    for i in range(300):
        ev.add(Op.cudaMalloc, i * MS, 20 * MS if i in (100, 200) else 10 * US, handle=i)
    assert "allocator-churn" not in ev.kinds()


def test_allocations_never_freed_are_a_growing_leak() -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaMalloc, i * MS, 10 * US, handle=0x7000 + i, nbytes=1 << 20)
    assert "memory-leak" in ev.kinds()


def test_balanced_alloc_free_is_not_a_leak() -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaMalloc, i * MS, 10 * US, handle=0x7000 + i, nbytes=1 << 20)
        ev.add(Op.cudaFree, i * MS + 100 * US, 10 * US, handle=0x7000 + i)
    assert "memory-leak" not in ev.kinds()


def test_slower_waits_while_another_process_uses_the_gpu_are_gpu_contention() -> None:
    ev = Events(comms={100: "train", 200: "infer"})
    for i in range(200):
        t = i * 2 * MS
        busy = i % 2 == 0
        ev.add(Op.cudaStreamSynchronize, t, 1200 * US if busy else 300 * US, 100)
        if busy:
            ev.add(Op.cudaStreamSynchronize, t + 50 * US, 1100 * US, 200)
    f = next(f for f in ev.report().findings if f.kind == "gpu-contention")
    assert f.symptom.pid == 100
    assert f.causes[0].culprits[0].pid == 200


def test_long_syncs_without_host_cause_are_a_gpu_bound_sync_stall() -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaLaunchKernel, i * 2 * MS, 5 * US)
        ev.add(Op.cudaStreamSynchronize, i * 2 * MS + 10 * US, 1500 * US)
    f = next(f for f in ev.report().findings if f.kind == "sync-stall")
    assert f.severity == Severity.MEDIUM


def test_gaps_without_gpu_work_while_on_cpu_are_data_starvation() -> None:
    ev = Events()
    for i in range(100):
        base = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, base, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 10 * US, 2 * MS)
    f = next(f for f in ev.report().findings if f.kind == "data-starvation")
    assert f.causes[0].metrics["on_cpu_share"] == 1.0


def test_rate_falling_by_half_for_several_bins_is_a_throughput_drop() -> None:
    ev = Events()
    t = 0
    for i in range(3000):
        t += 200 * US if i < 2000 else 500 * US
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
    assert "throughput-drop" in ev.kinds()


def test_steady_rate_is_not_a_throughput_drop() -> None:
    ev = Events()
    for i in range(3000):
        ev.add(Op.cudaLaunchKernel, i * 200 * US, 5 * US)
    assert "throughput-drop" not in ev.kinds()


def test_gaps_after_trivial_syncs_are_not_starvation() -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaLaunchKernel, i * 10 * MS, 5 * US)
        ev.add(Op.cudaStreamSynchronize, i * 10 * MS + 10 * US, 20 * US)
    assert "data-starvation" not in ev.kinds()


def test_waits_spent_behind_another_process_are_contention_not_a_sync_stall() -> None:
    ev = Events()
    for i in range(100):
        t = i * 2 * MS
        ev.add(Op.cudaStreamSynchronize, t, 1500 * US, 100)
        ev.add(Op.cudaStreamSynchronize, t + 100 * US, 1300 * US, 200)
    assert "sync-stall" not in ev.kinds()
