"""A C workload's calls: exact counts, who made them, what they took and what they passed."""

from __future__ import annotations

import pytest

from tests.privileged.support import CUDA_DRIVER_OPS, CUDA_RUNTIME_OPS, ids_from, median, pack_dim, session_drops

MS = 1_000_000


@pytest.mark.parametrize("threads", [1, 4])
def test_each_call_is_recorded_once_under_the_pid_and_tid_of_the_thread_that_made_it(
    build_workload, trace_command, threads
):
    # given a workload making 150 iterations on each of `threads` threads
    exe = build_workload("cuda_ids.c")
    # when it is traced from launch to exit
    run = trace_command([str(exe), "150", str(threads)])
    # then every call is there exactly once
    assert run.returncode == 0, run.stderr
    pid, tids = ids_from(run.stdout)
    assert len(set(tids)) == threads and pid not in tids
    counts = run.op_counts()
    for op in CUDA_RUNTIME_OPS + CUDA_DRIVER_OPS:
        assert counts.get(op) == 150 * threads, (op, counts)
    assert counts.get("cudaDeviceSynchronize") == threads
    # and the calls carry the workload's pid, each worker's own tid, and its comm
    rows = run.query(
        "SELECT pid, tid, comm, count(*) FROM events WHERE source IN ('cuda', 'driver') GROUP BY pid, tid, comm"
    )
    per_tid = {tid: n for _, tid, _, n in rows}
    assert {r[0] for r in rows} == {pid}
    assert sorted(per_tid) == sorted(tids)
    assert set(per_tid.values()) == {150 * 10 + 1}
    assert {r[2] for r in rows} == {exe.name[:15]}
    # and nothing was lost
    assert run.query("SELECT events_dropped FROM sessions") == [(0,)]
    drops = session_drops(run)
    # mm_page_alloc rows come from in-kernel counters, not from the ring
    assert drops["submitted"] == run.query("SELECT count(*) FROM events WHERE op != 'mm_page_alloc'")[0][0]


def test_comm_is_the_executable_name_truncated_to_15_characters(build_workload, trace_command, tmp_path):
    # given the workload under a name longer than the kernel's 15-character comm
    exe = build_workload("cuda_ids.c")
    long_exe = tmp_path / "a_workload_with_a_long_name"
    long_exe.symlink_to(exe)
    # when it is traced
    run = trace_command([str(long_exe), "5", "1"])
    # then
    assert run.returncode == 0, run.stderr
    assert run.query("SELECT DISTINCT comm FROM events WHERE source = 'cuda'") == [("a_workload_with",)]


def test_durations_follow_the_configured_latency_of_each_call(build_workload, trace_command, standin):
    # given cudaStreamSynchronize spinning 2 ms, cudaMalloc left at its (near zero) default
    exe = build_workload("cuda_ids.c")
    # when 20 iterations are traced
    run = trace_command([str(exe), "20", "1"], env=standin.env(cudaStreamSynchronize="2ms"))
    # then every synchronize took at least the 2 ms it spun, and typically not much more
    assert run.returncode == 0, run.stderr
    sync = [int(d) for (d,) in run.query("SELECT duration_ns FROM events WHERE op = 'cudaStreamSynchronize'")]
    assert len(sync) == 20
    assert min(sync) >= 2 * MS
    assert median(sync) < 6 * MS
    # and an unconfigured call is timed far below that
    malloc = [int(d) for (d,) in run.query("SELECT duration_ns FROM events WHERE op = 'cudaMalloc'")]
    assert len(malloc) == 20
    assert 0 < median(malloc) < 0.5 * MS


def test_key_arguments_of_allocations_copies_and_launches_are_recorded(build_workload, trace_command):
    # given / when
    exe = build_workload("cuda_ids.c")
    run = trace_command([str(exe), "30", "2"])
    assert run.returncode == 0, run.stderr
    # then cudaMalloc records the size asked for and the distinct pointers it returned
    mallocs = run.query("SELECT bytes, handle, ret FROM events WHERE op = 'cudaMalloc'")
    assert len(mallocs) == 60
    assert {(b, r) for b, _, r in mallocs} == {(1 << 20, 0)}
    handles = [int(h) for _, h, _ in mallocs]
    assert 0 not in handles and len(set(handles)) == 60
    # and cudaFree is passed exactly the pointers cudaMalloc returned
    assert sorted(int(h) for (h,) in run.query("SELECT handle FROM events WHERE op = 'cudaFree'")) == sorted(handles)
    # and copies record direction and size
    assert run.query("SELECT DISTINCT arg0, bytes FROM events WHERE op = 'cudaMemcpy'") == [(1, 256)]
    assert run.query("SELECT DISTINCT arg0, bytes, stream FROM events WHERE op = 'cudaMemcpyAsync'") == [
        (2, 256, 0x5151)
    ]
    # and runtime launches record geometry, shared memory and stream
    assert run.query("SELECT DISTINCT arg0, arg1, bytes, stream FROM events WHERE op = 'cudaLaunchKernel'") == [
        (pack_dim(128, 2, 1), pack_dim(256, 1, 1), 48, 0x5151)
    ]
    # and driver launches too (grid, block, stream are passed partly on the stack)
    assert run.query("SELECT DISTINCT arg0, arg1, bytes, stream FROM events WHERE op = 'cuLaunchKernel'") == [
        (pack_dim(64, 1, 1), pack_dim(128, 1, 1), 0, 0x5151)
    ]
    # and both launches name the same, non-zero kernel function
    kernels = run.query("SELECT DISTINCT handle FROM events WHERE op IN ('cudaLaunchKernel', 'cuLaunchKernel')")
    assert len(kernels) == 1 and kernels[0][0] != 0
    assert run.query("SELECT DISTINCT bytes FROM events WHERE op = 'cuMemAlloc'") == [(4096,)]
    assert run.query("SELECT DISTINCT stream FROM events WHERE op = 'cudaStreamSynchronize'") == [(0x5151,)]


def test_driver_memsets_are_recorded_with_bytes_as_elements_times_width_pointer_and_stream(
    build_workload, trace_command
):
    # given a workload calling each driver memset (and two per-thread twins) 40 times with known arguments
    exe = build_workload("cuda_memsets.c")
    # when
    run = trace_command([str(exe), "40"])
    # then every call is counted once, twins under their base op
    assert run.returncode == 0, run.stderr
    counts = run.op_counts()
    assert {op: n for op, n in counts.items() if op.startswith("cuMemset")} == {
        "cuMemsetD8": 80,
        "cuMemsetD16": 40,
        "cuMemsetD32": 40,
        "cuMemsetD8Async": 40,
        "cuMemsetD16Async": 40,
        "cuMemsetD32Async": 80,
    }
    # and each row has bytes = N x element width, handle = the destination, the stream of the async ones
    rows = run.query(
        "SELECT op, source, bytes, handle, stream, arg0, ret FROM events WHERE op LIKE 'cuMemset%' "
        "GROUP BY op, source, bytes, handle, stream, arg0, ret ORDER BY op"
    )
    assert rows == [
        ("cuMemsetD16", "driver", 300 * 2, 0x7E00_0002_0000, 0, 0, 0),
        ("cuMemsetD16Async", "driver", 2048 * 2, 0x7E00_0005_0000, 0x5252, 0, 0),
        ("cuMemsetD32", "driver", 50 * 4, 0x7E00_0003_0000, 0, 0, 0),
        ("cuMemsetD32Async", "driver", 1024 * 4, 0x7E00_0006_0000, 0x5353, 0, 0),
        ("cuMemsetD8", "driver", 1000, 0x7E00_0001_0000, 0, 0, 0),
        ("cuMemsetD8Async", "driver", 4096, 0x7E00_0004_0000, 0x5151, 0, 0),
    ]
    # and analysis sees them as device memory fills, like cudaMemset
    assert run.query("SELECT DISTINCT kind FROM ops WHERE name LIKE 'cuMemset%'") == [("set",)]
    assert run.query("SELECT events_dropped FROM sessions") == [(0,)]


def test_the_return_code_of_a_failing_call_is_recorded(build_workload, trace_command, standin):
    # given a cudaMalloc that fails with cudaErrorMemoryAllocation (2)
    exe = build_workload("cuda_ids.c")
    env = standin.env()
    env["GPUSCOPE_STANDIN_RESULT"] = "cudaMalloc=2"
    # when
    run = trace_command([str(exe), "10", "1"], env=env)
    # then the failing calls carry ret = 2 and no pointer; the others succeed
    assert run.returncode == 0, run.stderr
    assert run.query("SELECT ret, handle, count(*) FROM events WHERE op = 'cudaMalloc' GROUP BY ret, handle") == [
        (2, 0, 10)
    ]
    assert run.query("SELECT DISTINCT ret FROM events WHERE source IN ('cuda', 'driver') AND op != 'cudaMalloc'") == [
        (0,)
    ]


def test_entry_only_mode_records_every_call_without_timing_it(build_workload, trace_command, standin):
    # given synchronizes that take 1 ms
    exe = build_workload("cuda_ids.c")
    # when traced with --entry-only
    run = trace_command([str(exe), "40", "2"], env=standin.env(cudaStreamSynchronize="1ms"), extra=["--entry-only"])
    # then counts are exact, no call has a duration, and all are flagged entry-only
    assert run.returncode == 0, run.stderr
    counts = run.op_counts()
    for op in CUDA_RUNTIME_OPS + CUDA_DRIVER_OPS:
        assert counts.get(op) == 80, (op, counts)
    rows = run.query(
        "SELECT count(*), max(duration_ns), min(flags & 1), max(ret) FROM events WHERE source IN ('cuda', 'driver')"
    )
    assert rows == [(80 * 10 + 2, 0, 1, 0)]
    # and arguments are still read at entry
    assert run.query("SELECT DISTINCT arg0, bytes FROM events WHERE op = 'cudaLaunchKernel'") == [
        (pack_dim(128, 2, 1), 48)
    ]
    assert run.query("SELECT events_dropped FROM sessions") == [(0,)]


def test_driver_calls_nested_in_runtime_calls_are_recorded_inside_their_interval(
    build_workload, trace_command, standin
):
    # given a runtime that forwards cudaMalloc -> cuMemAlloc_v2 and cudaLaunchKernel -> cuLaunchKernel,
    # with a driver call that takes measurable time
    exe = build_workload("cuda_ids.c")
    env = standin.env(cuMemAlloc="50us", cuLaunchKernel="50us")
    env["GPUSCOPE_STANDIN_NEST"] = "1"
    # when 25 iterations on 2 threads are traced
    run = trace_command([str(exe), "25", "2"], env=env)
    # then the nested driver calls add to the ones the workload makes itself
    assert run.returncode == 0, run.stderr
    counts = run.op_counts()
    assert counts["cudaMalloc"] == counts["cudaLaunchKernel"] == 50
    assert counts["cuMemAlloc"] == 50 + 50  # 50 nested + 50 direct
    assert counts["cuLaunchKernel"] == 50 + 50
    assert counts["cuMemFree"] == 50 + 50  # cudaFree -> cuMemFree_v2
    # and each runtime call contains exactly one driver call of its kind, on its thread, within its interval
    for outer, inner in (("cudaMalloc", "cuMemAlloc"), ("cudaLaunchKernel", "cuLaunchKernel")):
        rows = run.query(
            "SELECT o.id, count(i.id), min(i.duration_ns) FROM events o LEFT JOIN events i "
            "ON i.op = ? AND i.tid = o.tid AND i.ts_ns >= o.ts_ns "
            "AND i.ts_ns + i.duration_ns <= o.ts_ns + o.duration_ns "
            "WHERE o.op = ? GROUP BY o.id",
            (inner, outer),
        )
        assert len(rows) == 50
        assert {n for _, n, _ in rows} == {1}, (outer, inner)
        assert min(int(d) for _, _, d in rows) >= 50_000
    assert session_drops(run)["call_depth"] == 0
    assert session_drops(run)["unmatched_ret"] == 0
