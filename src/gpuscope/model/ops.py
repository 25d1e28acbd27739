"""Operation ids: the Python mirror of ``enum gs_op`` in bpf/include/events.h.

An op's id is the uprobe cookie of every symbol that implements it, so
versioned variants of one API (``cuMemAlloc`` / ``cuMemAlloc_v2``,
``cudaMemcpy_ptds``, ``cuLaunchKernel_ptsz``) record as the same op.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Source(enum.Enum):
    CUDA = "cuda"  # CUDA Runtime (libcudart)
    DRIVER = "driver"  # CUDA Driver (libcuda)
    HOST = "host"  # kernel tracepoints


class Op(enum.IntEnum):
    UNKNOWN = 0
    cudaMalloc = 1
    cudaFree = 2
    cudaMallocManaged = 3
    cudaMallocHost = 4
    cudaFreeHost = 5
    cudaMemcpy = 6
    cudaMemcpyAsync = 7
    cudaMemset = 8
    cudaMemsetAsync = 9
    cudaLaunchKernel = 10
    cudaLaunchKernelExC = 11
    cudaStreamSynchronize = 12
    cudaDeviceSynchronize = 13
    cudaEventSynchronize = 14
    cudaStreamWaitEvent = 15

    cuLaunchKernel = 64
    cuLaunchKernelEx = 65
    cuMemAlloc = 66
    cuMemFree = 67
    cuMemAllocManaged = 68
    cuMemcpyHtoD = 69
    cuMemcpyDtoH = 70
    cuMemcpyAsync = 71
    cuCtxSynchronize = 72
    cuStreamSynchronize = 73

    sched_switch = 192
    sched_wakeup = 193
    process_fork = 194
    process_exec = 195
    process_exit = 196
    block_io = 197
    tcp_retransmit = 198
    mm_page_alloc = 199
    direct_reclaim = 200
    oom_kill = 201

    @property
    def source(self) -> Source:
        return source_of(int(self))


class OpKind(enum.Enum):
    """What an op does, for analysis: grouping that does not depend on names."""

    ALLOC = "alloc"
    FREE = "free"
    COPY = "copy"
    SET = "set"
    LAUNCH = "launch"
    SYNC = "sync"
    SCHED = "sched"
    LIFECYCLE = "lifecycle"
    IO = "io"
    NET = "net"
    MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class OpInfo:
    op: Op
    source: Source
    kind: OpKind
    description: str


def source_of(op_id: int) -> Source:
    if op_id < 64:
        return Source.CUDA
    if op_id < 128:
        return Source.DRIVER
    return Source.HOST


_KINDS: dict[Op, tuple[OpKind, str]] = {
    Op.cudaMalloc: (OpKind.ALLOC, "device memory allocation"),
    Op.cudaFree: (OpKind.FREE, "device memory release"),
    Op.cudaMallocManaged: (OpKind.ALLOC, "unified memory allocation"),
    Op.cudaMallocHost: (OpKind.ALLOC, "pinned host memory allocation"),
    Op.cudaFreeHost: (OpKind.FREE, "pinned host memory release"),
    Op.cudaMemcpy: (OpKind.COPY, "synchronous copy"),
    Op.cudaMemcpyAsync: (OpKind.COPY, "asynchronous copy"),
    Op.cudaMemset: (OpKind.SET, "device memory fill"),
    Op.cudaMemsetAsync: (OpKind.SET, "asynchronous device memory fill"),
    Op.cudaLaunchKernel: (OpKind.LAUNCH, "kernel launch"),
    Op.cudaLaunchKernelExC: (OpKind.LAUNCH, "kernel launch with attributes"),
    Op.cudaStreamSynchronize: (OpKind.SYNC, "wait for a stream"),
    Op.cudaDeviceSynchronize: (OpKind.SYNC, "wait for the device"),
    Op.cudaEventSynchronize: (OpKind.SYNC, "wait for an event"),
    Op.cudaStreamWaitEvent: (OpKind.SYNC, "make a stream wait for an event"),
    Op.cuLaunchKernel: (OpKind.LAUNCH, "driver kernel launch"),
    Op.cuLaunchKernelEx: (OpKind.LAUNCH, "driver kernel launch with attributes"),
    Op.cuMemAlloc: (OpKind.ALLOC, "driver device allocation"),
    Op.cuMemFree: (OpKind.FREE, "driver device release"),
    Op.cuMemAllocManaged: (OpKind.ALLOC, "driver unified memory allocation"),
    Op.cuMemcpyHtoD: (OpKind.COPY, "driver host-to-device copy"),
    Op.cuMemcpyDtoH: (OpKind.COPY, "driver device-to-host copy"),
    Op.cuMemcpyAsync: (OpKind.COPY, "driver asynchronous copy"),
    Op.cuCtxSynchronize: (OpKind.SYNC, "driver wait for the context"),
    Op.cuStreamSynchronize: (OpKind.SYNC, "driver wait for a stream"),
    Op.sched_switch: (OpKind.SCHED, "thread off-CPU interval (preempted or blocked)"),
    Op.sched_wakeup: (OpKind.SCHED, "thread woken up"),
    Op.process_fork: (OpKind.LIFECYCLE, "new child process"),
    Op.process_exec: (OpKind.LIFECYCLE, "process exec"),
    Op.process_exit: (OpKind.LIFECYCLE, "process exit"),
    Op.block_io: (OpKind.IO, "block I/O request: ts = issue, duration = latency, bytes, arg0 = 1 write"),
    Op.tcp_retransmit: (OpKind.NET, "TCP segment retransmitted"),
    Op.mm_page_alloc: (OpKind.MEMORY, "page allocations (aggregated: bytes, arg0 = count)"),
    Op.direct_reclaim: (OpKind.MEMORY, "direct memory reclaim: duration = time stalled"),
    Op.oom_kill: (OpKind.LIFECYCLE, "OOM kill: handle = victim pid, bytes = victim rss"),
}

OPS: dict[Op, OpInfo] = {op: OpInfo(op, op.source, kind, desc) for op, (kind, desc) in _KINDS.items()}

# Suffixes the CUDA libraries append to versioned or per-thread-stream entry
# points. Stripped (repeatedly) to find the op a symbol implements.
_VARIANT = re.compile(r"(_v[0-9]+|_ptds|_ptsz)$")

_RUNTIME_NAMES = {op.name: op for op in Op if op.source is Source.CUDA and op is not Op.UNKNOWN}
_DRIVER_NAMES = {op.name: op for op in Op if op.source is Source.DRIVER}


def op_for_symbol(symbol: str) -> Op | None:
    """The op a library symbol implements, or None if it is not probed."""
    name = symbol
    while True:
        op = _RUNTIME_NAMES.get(name) or _DRIVER_NAMES.get(name)
        if op is not None:
            return op
        stripped = _VARIANT.sub("", name)
        if stripped == name:
            return None
        name = stripped


def op_name(op_id: int) -> str:
    try:
        return Op(op_id).name
    except ValueError:
        return f"op{op_id}"
