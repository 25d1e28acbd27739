"""GPU-side and flow rules, with the boundaries of their thresholds."""

from __future__ import annotations

import numpy as np
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


def _caching_allocator(cycles: int, period: int = 200 * MS, *, driver_too: bool = True) -> Events:
    """A PyTorch-like process: warm-up allocations, launches every ms, and ``cycles`` times memory freed then
    allocated again (``empty_cache`` in the loop); every runtime call also enters the driver, as on a GPU."""
    ev = Events()

    def alloc(op_rt: Op, op_drv: Op, ts: int, dur: int, handle: int, nbytes: int = 0) -> None:
        ev.add(op_rt, ts, dur, handle=handle, nbytes=nbytes)
        if driver_too:
            ev.add(op_drv, ts + 2 * US, dur - 4 * US, handle=handle, nbytes=nbytes)

    for i in range(4):  # warm-up: the cache fills, nothing is freed
        alloc(Op.cudaMalloc, Op.cuMemAlloc, i * MS, 900 * US, 0x100 + i, 1 << 30)
    end = 10 * MS + (cycles + 1) * period
    ev.loop(Op.cudaLaunchKernel, (end - 10 * MS) // MS, MS, 6 * US, start=10 * MS)
    for k in range(cycles):
        t = 10 * MS + (k + 1) * period + 300 * US
        for j in range(2):
            alloc(Op.cudaFree, Op.cuMemFree, t + j * MS, 800 * US, 0x100 + j)
        for j in range(2):
            alloc(Op.cudaMalloc, Op.cuMemAlloc, t + (2 + j) * MS, 900 * US, 0x100 + j, 1 << 30)
    for j in range(4):  # exit: everything freed, nothing taken again
        alloc(Op.cudaFree, Op.cuMemFree, end + j * MS, 800 * US, 0x100 + j)
    return ev


def test_memory_freed_and_allocated_again_after_warm_up_is_allocator_churn_once_per_process() -> None:
    # given a caching allocator that gives memory back and takes it again 8 times, every 200 ms,
    # with allocations all alike (no spikes) and every runtime call doubled by its driver call
    report = _caching_allocator(8).report()
    # then one finding, counted at the runtime layer
    found = [f for f in report.findings if f.kind == "allocator-churn"]
    assert len(found) == 1
    cause = found[0].causes[0]
    assert cause.metrics["reacquires"] == 8
    assert cause.metrics["period_cv"] < 0.1
    assert found[0].symptom.op == "cudaMalloc" and found[0].symptom.count == 16
    # the lost time is the re-acquiring allocations and the frees before them, not warm-up or exit
    assert found[0].lost_ns == 8 * 2 * (900 + 800) * US
    assert "empty_cache" in found[0].fix


def test_driver_only_allocations_are_read_at_the_driver_layer() -> None:
    ev = Events()
    for e in _caching_allocator(5, driver_too=True).rows:
        if e[4] not in (int(Op.cudaMalloc), int(Op.cudaFree)):
            ev.rows.append(e)
    found = [f for f in ev.report().findings if f.kind == "allocator-churn"]
    assert len(found) == 1 and found[0].symptom.op == "cuMemAlloc"
    assert found[0].causes[0].metrics["reacquires"] == 5


def test_allocating_and_freeing_in_every_iteration_is_left_to_the_spikes_reading() -> None:
    # given a program that calls cudaMalloc and cudaFree itself each iteration, all alike (no caching allocator)
    ev = Events()
    for i in range(300):
        ev.add(Op.cudaMalloc, i * MS, 300 * US, handle=0x100)
        ev.add(Op.cudaLaunchKernel, i * MS + 400 * US, 5 * US)
        ev.add(Op.cudaFree, i * MS + 500 * US, 100 * US, handle=0x100)
    assert "allocator-churn" not in ev.kinds()


def test_re_acquisitions_that_cost_next_to_nothing_are_not_churn() -> None:
    # given the same cycles as a caching allocator's, but each allocation served in 1 µs (a pool, not the driver)
    ev = Events()
    for e in _caching_allocator(8).rows:
        if e[4] == int(Op.cudaMalloc):
            e = (*e[:1], 1 * US, *e[2:])
        ev.rows.append(e)
    assert "allocator-churn" not in ev.kinds()


@pytest.mark.parametrize("cycles", [0, 2])
def test_warm_up_and_exit_alone_or_two_cycles_are_not_churn(cycles: int) -> None:
    assert "allocator-churn" not in _caching_allocator(cycles).kinds()


def test_allocations_never_freed_are_a_growing_leak() -> None:
    ev = Events()
    for i in range(100):
        ev.add(Op.cudaMalloc, i * MS, 10 * US, handle=0x7000 + i, nbytes=1 << 20)
    assert "memory-leak" in ev.kinds()


def test_a_caching_allocator_filling_up_in_its_first_steps_is_not_a_leak() -> None:
    # given 60 allocations never freed (the cache), all made in the first steps, then a long steady loop
    ev = Events()
    for i in range(60):
        ev.add(Op.cudaMalloc, i * MS, 90 * US, handle=0x7000 + i, nbytes=64 << 20)
        ev.add(Op.cuMemAlloc, i * MS + US, 80 * US, handle=0x7000 + i, nbytes=64 << 20)
    ev.loop(Op.cudaLaunchKernel, 5000, 200 * US, 5 * US, start=60 * MS)
    assert "memory-leak" not in ev.kinds()


def test_allocations_that_keep_coming_through_the_loop_are_a_leak_counted_once_per_layer() -> None:
    # given one unfreed 64 MiB allocation every 10 launches, runtime and driver both recorded
    ev = Events()
    for i in range(1000):
        ev.add(Op.cudaLaunchKernel, i * MS, 5 * US)
        if i % 10 == 0:
            ev.add(Op.cudaMalloc, i * MS + 10 * US, 90 * US, handle=0x7000 + i, nbytes=64 << 20)
            ev.add(Op.cuMemAlloc, i * MS + 11 * US, 80 * US, handle=0x7000 + i, nbytes=64 << 20)
    f = next(f for f in ev.report().findings if f.kind == "memory-leak")
    assert f.causes[0].metrics["unfreed_allocs"] == 100
    assert f.causes[0].metrics["live_bytes"] == 100 * (64 << 20)


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


def test_data_starvation_draws_the_gpus_idle_share_over_time() -> None:
    # given 100 steps of 10 ms whose GPU idles ~8 ms after each sync, then 100 fed steps (no gap)
    ev = Events()
    for i in range(100):
        base = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, base, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 10 * US, 2 * MS)
    for i in range(100, 200):
        base = i * 10 * MS
        for k in range(10):
            ev.add(Op.cudaLaunchKernel, base + k * MS, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 9 * MS + 10 * US, 990 * US)
    f = next(f for f in ev.report().findings if f.kind == "data-starvation")
    # then its cause carries the idle share per bin, as a percentage over the process's time
    series = f.causes[0].series
    assert series is not None and series.unit == "%" and series.label == "GPU idle"
    values = np.array(series.values)
    assert len(values) > 10 and values.min() >= 0 and values.max() <= 100
    # high while it starved, nil once fed
    half = len(values) // 2
    assert values[: half - 2].mean() > 70 and values[half + 2 :].max() < 5, values
    assert series.bin_ns * len(values) >= 1990 * MS


def test_a_throughput_drop_draws_its_rate_over_time() -> None:
    # given 5 s at 5,000 calls a second, then 2 s at 1,000 a second
    ev = _launch_rate_falling(25_000, 2_000, 200 * US, 1000 * US)
    drop = next(f for f in ev.report().findings if f.kind == "throughput-drop")
    # then its cause carries the call rate per bin: the peak, then the fall, in calls a second
    series = drop.causes[0].series
    assert series is not None and series.unit == "/s" and "cudaLaunchKernel" in series.label
    assert max(series.values) == pytest.approx(5000, rel=0.05)
    assert series.values[-1] == pytest.approx(1000, rel=0.1)
    assert drop.span is not None and series.start_ns <= drop.span.start_ns


def _launch_rate_falling(before: int, after: int, fast: int, slow: int) -> Events:
    """``before`` launches ``fast`` ns apart, then ``after`` launches ``slow`` ns apart."""
    ev = Events()
    t = 0
    for i in range(before + after):
        t += fast if i < before else slow
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
    return ev


def test_rate_falling_by_half_for_several_bins_is_a_throughput_drop() -> None:
    assert "throughput-drop" in _launch_rate_falling(2000, 1000, 200 * US, 500 * US).kinds()


def test_a_throughput_drops_span_is_its_low_rate_period_not_the_whole_run() -> None:
    # given 5 s at 5,000 calls a second, then 2 s at 1,000 a second
    ev = _launch_rate_falling(25_000, 2_000, 200 * US, 1000 * US)
    drop = next(f for f in ev.report().findings if f.kind == "throughput-drop")
    # then its span starts within a bin (the rows' bins: a tenth of the run) of the fall, and ends by the run's end
    assert drop.span is not None
    fall, end, bin_ns = 25_000 * 200 * US, 25_000 * 200 * US + 2000 * 1000 * US, 700 * MS
    assert fall - bin_ns <= drop.span.start_ns <= fall + bin_ns, drop.span
    assert fall < drop.span.end_ns <= end, drop.span


def test_every_finding_of_a_process_has_a_span_inside_the_window() -> None:
    # given a rate that drops (its rule sets its span; the others are given their calls' span)
    report = _launch_rate_falling(2000, 1000, 200 * US, 500 * US).report()
    assert report.findings
    for f in report.findings:
        assert f.span is not None, f.kind
        assert report.window.start_ns <= f.span.start_ns < f.span.end_ns <= report.window.end_ns, (f.kind, f.span)


def test_steady_rate_is_not_a_throughput_drop() -> None:
    ev = Events()
    for i in range(3000):
        ev.add(Op.cudaLaunchKernel, i * 200 * US, 5 * US)
    assert "throughput-drop" not in ev.kinds()


def test_a_slow_start_before_the_rate_is_reached_is_not_a_throughput_drop() -> None:
    # given a process that copies its model early, sets up for a while, then runs at its full rate to the end
    ev = Events()
    t = 0
    for i in range(3000):
        t += 20 * MS if i < 40 else 200 * US
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
    assert "throughput-drop" not in ev.kinds()


def test_the_same_slow_period_after_the_rate_was_reached_is_a_drop() -> None:
    ev = Events()
    t = 0
    for i in range(4000):
        t += 20 * MS if 1000 <= i < 1040 else 200 * US
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
    assert "throughput-drop" in ev.kinds()


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


def _quick_sync_loop(waker_pid: int, waker_tid: int, steps: int = 100) -> Events:
    """A small model on a fast GPU: launch, 20 µs sync, then the CUDA thread blocks 8 ms until woken."""
    ev = Events()
    for i in range(steps):
        t = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
        ev.add(Op.cudaStreamSynchronize, t + 10 * US, 20 * US)
        ev.sched(t + 100 * US, 8 * MS, preempted=False)
        ev.add(Op.sched_wakeup, t + 100 * US + 8 * MS, 0, handle=(waker_pid << 32) | waker_tid)
    return ev


def test_quick_syncs_and_a_thread_waiting_for_its_data_loader_are_data_starvation() -> None:
    # given the CUDA thread of pid 100 blocked between steps until its loader thread 101 hands it a batch
    f = next(f for f in _quick_sync_loop(100, 101).report().findings if f.kind == "data-starvation")
    assert f.causes[0].metrics["fed_gaps"] == 99
    assert f.causes[0].metrics["on_cpu_share"] < 0.5
    assert "woke it" in f.causes[0].evidence[1] and "thread 101" in f.causes[0].evidence[1]


def test_a_data_loader_worker_process_waking_the_cuda_thread_counts_as_its_feeder() -> None:
    ev = _quick_sync_loop(300, 300)
    ev.add(Op.process_fork, 0, 0, handle=300)  # pid 100 forked its loader worker 300
    assert "data-starvation" in ev.kinds()


def test_quick_syncs_and_a_thread_woken_by_an_outside_task_are_not_starvation() -> None:
    # e.g. a server waiting for requests: woken by the network, not by a feeder of its own
    assert "data-starvation" not in _quick_sync_loop(555, 556).kinds()
