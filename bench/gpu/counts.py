"""The count check: what gpuscope recorded against an independent source (CUPTI through torch.profiler).

Pure Python, no torch: it reads the profiler's Chrome trace and the recording, so it is tested on any machine
(tests/unit/bench/test_gpu_counts.py).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpuscope

WINDOW = "gs_window"  # the record_function range the workload opens around its measured steps


@dataclass
class CuptiCounts:
    """What CUPTI saw inside the workload's measured window."""

    runtime: Counter[str] = field(default_factory=Counter)  # CUDA Runtime API calls by name
    driver: Counter[str] = field(default_factory=Counter)  # CUDA Driver API calls by name
    kernels: int = 0  # kernels executed for launches made in the window
    memcpys: int = 0
    memsets: int = 0


def cupti_counts(trace: Path, window: str = WINDOW) -> CuptiCounts:
    """Count the API calls CUPTI recorded inside the ``window`` annotation, and the GPU work they issued.

    A kernel belongs to the window when its correlation id is one of a call made in it: work still
    running when the window closed counts, work issued before it opened does not.
    """
    events: list[dict[str, Any]] = json.loads(trace.read_text()).get("traceEvents", [])
    spans = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == window]
    if len(spans) != 1:
        raise ValueError(f"{trace}: expected one {window!r} annotation, found {len(spans)}")
    lo = float(spans[0]["ts"])
    hi = lo + float(spans[0].get("dur", 0))
    out = CuptiCounts()
    correlations: set[int] = set()
    for e in events:
        cat = e.get("cat")
        if cat not in ("cuda_runtime", "cuda_driver") or not lo <= float(e.get("ts", -1)) <= hi:
            continue
        (out.runtime if cat == "cuda_runtime" else out.driver)[str(e.get("name"))] += 1
        corr = e.get("args", {}).get("correlation")
        if corr is not None:
            correlations.add(int(corr))
    for e in events:
        corr = e.get("args", {}).get("correlation")
        if corr is None or int(corr) not in correlations:
            continue
        cat = e.get("cat")
        if cat == "kernel":
            out.kernels += 1
        elif cat == "gpu_memcpy":
            out.memcpys += 1
        elif cat == "gpu_memset":
            out.memsets += 1
    return out


def recorded_counts(db: Path, pid: int | None, window_ns: tuple[int, int] | None = None) -> Counter[str]:
    """Calls gpuscope recorded (rows, so the recording must be --record-all) by op, optionally in a window."""
    sql = "SELECT op, count(*) AS n FROM events WHERE source IN ('cuda', 'driver', 'nccl')"
    params: list[Any] = []
    if pid is not None:
        sql += " AND pid = ?"
        params.append(pid)
    if window_ns is not None:
        sql += " AND ts_ns BETWEEN ? AND ?"
        params.extend(window_ns)
    rows = gpuscope.open(db, frame="rows").query(sql + " GROUP BY op", params)
    return Counter({str(r["op"]): int(r["n"]) for r in rows})


def traced_pids(db: Path) -> list[int]:
    """Processes that made CUDA calls in the recording, most calls first."""
    rows = gpuscope.open(db, frame="rows").query(
        "SELECT pid, count(*) AS n FROM events WHERE source IN ('cuda', 'driver') GROUP BY pid ORDER BY n DESC"
    )
    return [int(r["pid"]) for r in rows]


# gpuscope op -> the CUPTI runtime names that are the same API (per-thread-stream variants record as one op).
RUNTIME_PAIRS = {
    "cudaLaunchKernel": ("cudaLaunchKernel", "cudaLaunchKernel_ptsz"),
    "cudaLaunchKernelExC": ("cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"),
    "cudaMemcpyAsync": ("cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"),
    "cudaMemsetAsync": ("cudaMemsetAsync", "cudaMemsetAsync_ptsz"),
    "cudaStreamSynchronize": ("cudaStreamSynchronize", "cudaStreamSynchronize_ptsz"),
    "cudaDeviceSynchronize": ("cudaDeviceSynchronize",),
    "cudaStreamWaitEvent": ("cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz"),
    "cudaEventSynchronize": ("cudaEventSynchronize",),
    "cudaMalloc": ("cudaMalloc",),
    "cudaFree": ("cudaFree",),
    "cudaGraphLaunch": ("cudaGraphLaunch", "cudaGraphLaunch_ptsz"),
}
DRIVER_PAIRS = {
    "cuLaunchKernel": ("cuLaunchKernel", "cuLaunchKernel_ptsz"),
    "cuLaunchKernelEx": ("cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"),
}


@dataclass(frozen=True)
class Comparison:
    api: str
    gpuscope: int
    cupti: int

    @property
    def exact(self) -> bool:
        return self.gpuscope == self.cupti


def compare(recorded: Counter[str], cupti: CuptiCounts) -> list[Comparison]:
    """One row per API either side saw, gpuscope's op against CUPTI's callbacks for the same API."""
    out = []
    for op, names in RUNTIME_PAIRS.items():
        seen = sum(cupti.runtime[n] for n in names)
        if seen or recorded[op]:
            out.append(Comparison(op, recorded[op], seen))
    for op, names in DRIVER_PAIRS.items():
        seen = sum(cupti.driver[n] for n in names)
        if seen or recorded[op]:
            out.append(Comparison(op, recorded[op], seen))
    return out


def memsets(recorded: Counter[str]) -> dict[str, int]:
    """Memsets by layer. Libraries with a statically linked runtime (cuBLAS) never enter libcudart.so, so only
    the driver layer sees all of them."""
    return {
        "runtime": recorded["cudaMemset"] + recorded["cudaMemsetAsync"],
        "driver": sum(n for op, n in recorded.items() if op.startswith("cuMemsetD")),
    }


def launches(recorded: Counter[str]) -> dict[str, int]:
    """Kernel and graph launches by the layer gpuscope saw them at.

    Every runtime launch also enters the driver, and libraries that launch through the driver alone (cuBLAS,
    Triton) are seen only there: the driver layer is the complete count, the runtime layer a subset.
    """
    return {
        "runtime": recorded["cudaLaunchKernel"] + recorded["cudaLaunchKernelExC"],
        "driver": recorded["cuLaunchKernel"] + recorded["cuLaunchKernelEx"],
        "graph_runtime": recorded["cudaGraphLaunch"],
        "graph_driver": recorded["cuGraphLaunch"],
    }
