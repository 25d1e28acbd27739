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
    NCCL = "nccl"  # NCCL (libnccl)
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
    cudaStreamBeginCapture = 20
    cudaStreamEndCapture = 21
    cudaGraphInstantiate = 22
    cudaGraphLaunch = 23
    cudaGraphExecUpdate = 24
    cudaGraphDestroy = 25
    cudaGraphExecDestroy = 26

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
    cuMemsetD8 = 74
    cuMemsetD16 = 75
    cuMemsetD32 = 76
    cuMemsetD8Async = 77
    cuMemsetD16Async = 78
    cuMemsetD32Async = 79
    cuStreamBeginCapture = 80
    cuStreamEndCapture = 81
    cuGraphInstantiate = 82
    cuGraphLaunch = 83
    cuGraphExecUpdate = 84
    cuGraphDestroy = 85
    cuGraphExecDestroy = 86

    ncclAllReduce = 128
    ncclReduce = 129
    ncclBroadcast = 130
    ncclAllGather = 131
    ncclReduceScatter = 132
    ncclSend = 133
    ncclRecv = 134
    ncclGroupStart = 135
    ncclGroupEnd = 136
    ncclCommInitRank = 137
    ncclCommInitRankConfig = 138
    ncclCommDestroy = 139
    ncclCommAbort = 140

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
    GRAPH = "graph"
    COLLECTIVE = "collective"
    COMM = "comm"


@dataclass(frozen=True, slots=True)
class OpInfo:
    op: Op
    source: Source
    kind: OpKind
    description: str


# Op ids are laid out by source: CUDA runtime < 64 <= driver < 128 <= NCCL < 192 <= host.
FIRST_HOST_OP_ID = 192


def source_of(op_id: int) -> Source:
    if op_id < 64:
        return Source.CUDA
    if op_id < 128:
        return Source.DRIVER
    if op_id < FIRST_HOST_OP_ID:
        return Source.NCCL
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
    Op.cuMemsetD8: (OpKind.SET, "driver device memory fill, 1-byte values: bytes = N"),
    Op.cuMemsetD16: (OpKind.SET, "driver device memory fill, 2-byte values: bytes = 2 N"),
    Op.cuMemsetD32: (OpKind.SET, "driver device memory fill, 4-byte values: bytes = 4 N"),
    Op.cuMemsetD8Async: (OpKind.SET, "driver asynchronous device memory fill, 1-byte values: bytes = N"),
    Op.cuMemsetD16Async: (OpKind.SET, "driver asynchronous device memory fill, 2-byte values: bytes = 2 N"),
    Op.cuMemsetD32Async: (OpKind.SET, "driver asynchronous device memory fill, 4-byte values: bytes = 4 N"),
    Op.cudaStreamBeginCapture: (OpKind.GRAPH, "start capturing a stream into a graph: arg0 = mode"),
    Op.cudaStreamEndCapture: (OpKind.GRAPH, "end capture: handle = graph"),
    Op.cudaGraphInstantiate: (OpKind.GRAPH, "instantiate a graph: handle = exec, arg0 = graph"),
    Op.cudaGraphLaunch: (OpKind.GRAPH, "launch a graph: handle = exec"),
    Op.cudaGraphExecUpdate: (OpKind.GRAPH, "update an instantiated graph: handle = exec, arg0 = graph"),
    Op.cudaGraphDestroy: (OpKind.GRAPH, "destroy a graph: handle = graph"),
    Op.cudaGraphExecDestroy: (OpKind.GRAPH, "destroy an instantiated graph: handle = exec"),
    Op.cuStreamBeginCapture: (OpKind.GRAPH, "driver: start capturing a stream"),
    Op.cuStreamEndCapture: (OpKind.GRAPH, "driver: end capture: handle = graph"),
    Op.cuGraphInstantiate: (OpKind.GRAPH, "driver: instantiate: handle = exec, arg0 = graph"),
    Op.cuGraphLaunch: (OpKind.GRAPH, "driver: launch a graph: handle = exec"),
    Op.cuGraphExecUpdate: (OpKind.GRAPH, "driver: update an instantiated graph"),
    Op.cuGraphDestroy: (OpKind.GRAPH, "driver: destroy a graph"),
    Op.cuGraphExecDestroy: (OpKind.GRAPH, "driver: destroy an instantiated graph"),
    Op.ncclAllReduce: (OpKind.COLLECTIVE, "all-reduce"),
    Op.ncclReduce: (OpKind.COLLECTIVE, "reduce to a root"),
    Op.ncclBroadcast: (OpKind.COLLECTIVE, "broadcast from a root"),
    Op.ncclAllGather: (OpKind.COLLECTIVE, "all-gather"),
    Op.ncclReduceScatter: (OpKind.COLLECTIVE, "reduce-scatter"),
    Op.ncclSend: (OpKind.COLLECTIVE, "point-to-point send"),
    Op.ncclRecv: (OpKind.COLLECTIVE, "point-to-point receive"),
    Op.ncclGroupStart: (OpKind.COMM, "start a group of NCCL calls"),
    Op.ncclGroupEnd: (OpKind.COMM, "end a group: the grouped calls are issued"),
    Op.ncclCommInitRank: (OpKind.COMM, "join a communicator: handle = comm, arg0 = rank, arg1 = nranks"),
    Op.ncclCommInitRankConfig: (OpKind.COMM, "join a communicator with a config"),
    Op.ncclCommDestroy: (OpKind.COMM, "leave a communicator"),
    Op.ncclCommAbort: (OpKind.COMM, "abort a communicator"),
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

# Rows that count events over an interval (their duration is the interval), not calls: timelines draw them
# as counters, never as slices.
AGGREGATED_OPS = frozenset({Op.mm_page_alloc})

OPS: dict[Op, OpInfo] = {op: OpInfo(op, op.source, kind, desc) for op, (kind, desc) in _KINDS.items()}

# Suffixes the CUDA libraries append to versioned or per-thread-stream entry
# points. Stripped (repeatedly) to find the op a symbol implements.
_VARIANT = re.compile(r"(_v[0-9]+|_ptds|_ptsz)$")

_API_NAMES: dict[str, Op] = {
    op.name: op for op in Op if op.source in (Source.CUDA, Source.DRIVER, Source.NCCL) and op is not Op.UNKNOWN
}
# Entry points with another name but the same signature as an op.
_API_NAMES.update(
    {
        "cudaGraphInstantiateWithFlags": Op.cudaGraphInstantiate,
        "cuGraphInstantiateWithFlags": Op.cuGraphInstantiate,
    }
)


def op_for_symbol(symbol: str) -> Op | None:
    """The op a library symbol implements, or None if it is not probed."""
    name = symbol
    while True:
        op = _API_NAMES.get(name)
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
