"""A host-bound Python step loop for bench/cpu_sample_bench.py: pure Python work, then a few CUDA calls.

    py_host_loop.py calibrate               print the ns one unit of work takes here
    py_host_loop.py LIBCUDART SECONDS UNITS [DEPTH]

Each step builds a batch of UNITS items in pure Python (arithmetic and list
appends, as a Dataset's ``__getitem__`` and a collate function do), then makes
four launches and a stream sync through ctypes. The step runs DEPTH Python
frames below ``main`` (default 12), so the sampler's Python walk has the depth of
framework code to read, not one frame. Steps run for about SECONDS after two
unmeasured ones.

Prints one JSON line: pid, steps, the loop's first and last instants
(CLOCK_MONOTONIC ns, the clock of ``cpu_samples.ts_ns``), its process CPU time
(ns) and its median step (ns).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from collections.abc import Callable


def transform(i: int) -> int:
    x = (i * 2654435761) % 1000003
    return (x ^ (x >> 3)) & 0xFF


def build_batch(units: int) -> list[int]:
    out = []
    for i in range(units):
        out.append(transform(i))
    return out


def collate(batch: list[int]) -> float:
    return sum(batch) / max(len(batch), 1)


def nested(depth: int, fn: Callable[[], object]) -> object:
    """Call ``fn`` ``depth`` frames further down."""
    return nested(depth - 1, fn) if depth > 0 else fn()


def calibrate() -> None:
    """Print the ns of one unit of work: the fastest of seven 200k-unit batches, the one others disturbed least."""
    runs = []
    for _ in range(7):
        t = time.perf_counter_ns()
        collate(build_batch(200_000))
        runs.append((time.perf_counter_ns() - t) / 200_000)
    print(min(runs))


def main() -> None:
    if sys.argv[1] == "calibrate":
        calibrate()
        return
    lib = ctypes.CDLL(sys.argv[1])
    seconds, units = float(sys.argv[2]), int(sys.argv[3])
    depth = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    launch = lib.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    launch.argtypes += [ctypes.c_void_p]
    launch.restype = ctypes.c_int
    sync = lib.cudaStreamSynchronize
    sync.argtypes = [ctypes.c_void_p]
    sync.restype = ctypes.c_int

    def step() -> None:
        collate(build_batch(units))
        for _ in range(4):
            launch(None, 1, 1, None, 0, None)
        sync(None)

    for _ in range(2):
        nested(depth, step)
    steps: list[int] = []
    cpu0 = time.process_time_ns()
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    end = start + int(seconds * 1e9)
    now = start
    while now < end:
        nested(depth, step)
        t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        steps.append(t - now)
        now = t
    cpu_ns = time.process_time_ns() - cpu0
    steps_sorted = sorted(steps)
    doc = {
        "pid": os.getpid(),
        "steps": len(steps),
        "start_ns": start,
        "end_ns": now,
        "cpu_ns": cpu_ns,
        "step_ns_p50": steps_sorted[len(steps_sorted) // 2],
    }
    print(json.dumps(doc), flush=True)


if __name__ == "__main__":
    main()
