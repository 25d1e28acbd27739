"""The tracing spine end to end: a C workload's calls are all recorded, exactly."""

from __future__ import annotations


def test_every_call_of_a_c_workload_is_recorded_exactly_once(build_workload, trace_command):
    # given a workload making 200 iterations on each of 2 threads
    exe = build_workload("cuda_calls.c")
    # when it is traced from launch to exit
    run = trace_command([str(exe), "200", "2"])
    # then
    assert run.returncode == 0, run.stderr
    counts = run.op_counts()
    for op in (
        "cudaMalloc",
        "cudaMemcpy",
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaStreamSynchronize",
        "cudaFree",
        "cuLaunchKernel",
        "cuMemAlloc",
        "cuMemFree",
        "cuCtxSynchronize",
    ):
        assert counts.get(op) == 400, (op, counts)
    assert counts["cudaDeviceSynchronize"] == 2
    assert run.query("SELECT events_dropped FROM sessions") == [(0,)]
