"""How each Ingero ``(source, op)`` code becomes a gpuscope op and event columns.

Ingero stores numeric source and op codes (its lookup tables miss several of
them, so the codes are listed here from its source, not read from the file)
and two generic arguments, ``arg0`` and ``arg1``, whose meaning depends on the
op. A :class:`Rule` names the gpuscope op an Ingero op becomes and which of our
columns receives each argument. The raw values are always kept too, in
``imported_events``, so nothing depends on this mapping being complete.
"""

from __future__ import annotations

from dataclasses import dataclass

# Ingero's EVENT_SRC_* codes.
SOURCES: dict[int, str] = {
    1: "cuda",
    2: "nvidia",
    3: "host",
    4: "driver",
    5: "io",
    6: "tcp",
    7: "net",
    8: "cuda_graph",
    9: "nccl",
}

# (source, op) -> Ingero's op name.
OP_NAMES: dict[tuple[int, int], str] = {
    (1, 1): "cudaMalloc",
    (1, 2): "cudaFree",
    (1, 3): "cudaLaunchKernel",
    (1, 4): "cudaMemcpy",
    (1, 5): "cudaStreamSync",
    (1, 6): "cudaDeviceSync",
    (1, 7): "cudaMemcpyAsync",
    (1, 8): "cudaMallocManaged",
    (1, 9): "cudaMemcpy2D",
    (1, 10): "cudaMemcpy2DAsync",
    (1, 11): "cudaMemcpyPeer",
    (1, 12): "cudaMemcpyPeerAsync",
    (3, 1): "sched_switch",
    (3, 2): "sched_wakeup",
    (3, 3): "mm_page_alloc",
    (3, 4): "oom_kill",
    (3, 5): "process_exec",
    (3, 6): "process_exit",
    (3, 7): "process_fork",
    (3, 10): "pod_restart",
    (3, 11): "pod_eviction",
    (3, 12): "pod_oom_kill",
    (3, 20): "mm_page_alloc_summary",
    (3, 21): "sched_switch_summary",
    (4, 1): "cuLaunchKernel",
    (4, 2): "cuMemcpy",
    (4, 3): "cuMemcpyAsync",
    (4, 4): "cuCtxSynchronize",
    (4, 5): "cuMemAlloc",
    (4, 6): "cuMemAllocManaged",
    (5, 1): "block_read",
    (5, 2): "block_write",
    (5, 3): "block_discard",
    (6, 1): "tcp_retransmit",
    (7, 1): "net_send",
    (7, 2): "net_recv",
    (8, 1): "graphBeginCapture",
    (8, 2): "graphEndCapture",
    (8, 3): "graphInstantiate",
    (8, 4): "graphLaunch",
    (8, 5): "graphDestroy",
    (8, 6): "graphExecUpdate",
    (8, 7): "graphExecDestroy",
    (9, 1): "commInitRank",
    (9, 2): "commDestroy",
    (9, 3): "allReduce",
    (9, 4): "allGather",
    (9, 5): "reduceScatter",
    (9, 6): "bcast",
    (9, 7): "send",
    (9, 8): "recv",
    (9, 9): "commInitAll",
}

# Columns of event_log an Ingero argument can go to.
COLUMNS = ("bytes", "handle", "stream", "arg0", "arg1")


@dataclass(frozen=True, slots=True)
class Rule:
    """One Ingero op as gpuscope records it.

    ``arg0_to``/``arg1_to`` name the event_log column that receives Ingero's
    argument (None: kept only in ``imported_events``). ``fixed_arg0`` sets our
    ``arg0`` whatever Ingero had (block I/O direction, page-alloc count).
    ``ends_at_timestamp``: Ingero stamps the event when it is emitted, at the
    end of the interval, where gpuscope stamps its start.
    """

    name: str
    source: str
    kind: str
    arg0_to: str | None = None
    arg1_to: str | None = None
    arg0_scale: int = 1
    fixed_arg0: int | None = None
    ends_at_timestamp: bool = False


_COPY = ("bytes", "arg0")  # count, cudaMemcpyKind

RULES: dict[str, Rule] = {
    "cudaMalloc": Rule("cudaMalloc", "cuda", "alloc", "bytes", "handle"),
    "cudaFree": Rule("cudaFree", "cuda", "free", "handle", "bytes"),
    "cudaLaunchKernel": Rule("cudaLaunchKernel", "cuda", "launch", "handle", "stream"),
    "cudaMemcpy": Rule("cudaMemcpy", "cuda", "copy", *_COPY),
    "cudaMemcpyAsync": Rule("cudaMemcpyAsync", "cuda", "copy", *_COPY),
    "cudaStreamSync": Rule("cudaStreamSynchronize", "cuda", "sync", "stream"),
    "cudaDeviceSync": Rule("cudaDeviceSynchronize", "cuda", "sync"),
    "cudaMallocManaged": Rule("cudaMallocManaged", "cuda", "alloc", "bytes", "handle"),
    "cudaMemcpy2D": Rule("cudaMemcpy2D", "cuda", "copy", *_COPY),
    "cudaMemcpy2DAsync": Rule("cudaMemcpy2DAsync", "cuda", "copy", *_COPY),
    "cudaMemcpyPeer": Rule("cudaMemcpyPeer", "cuda", "copy", *_COPY),
    "cudaMemcpyPeerAsync": Rule("cudaMemcpyPeerAsync", "cuda", "copy", *_COPY),
    "sched_switch": Rule("sched_switch", "host", "sched", ends_at_timestamp=True),
    "sched_wakeup": Rule("sched_wakeup", "host", "sched"),
    "mm_page_alloc": Rule("mm_page_alloc", "host", "memory", "bytes", fixed_arg0=1),
    "mm_page_alloc_summary": Rule("mm_page_alloc", "host", "memory", "arg0", "bytes"),
    "sched_switch_summary": Rule("sched_switch_summary", "host", "sched", "arg0", "arg1"),
    "oom_kill": Rule("oom_kill", "host", "lifecycle"),
    "process_exec": Rule("process_exec", "host", "lifecycle"),
    "process_exit": Rule("process_exit", "host", "lifecycle"),
    # The child's pid (the reference's target_pid) in our handle, as gpuscope's own fork rows keep it.
    "process_fork": Rule("process_fork", "host", "lifecycle", arg1_to="handle"),
    "pod_restart": Rule("pod_restart", "host", "lifecycle"),
    "pod_eviction": Rule("pod_eviction", "host", "lifecycle"),
    "pod_oom_kill": Rule("pod_oom_kill", "host", "lifecycle"),
    "cuLaunchKernel": Rule("cuLaunchKernel", "driver", "launch", "handle"),
    "cuMemcpy": Rule("cuMemcpy", "driver", "copy", "bytes"),
    "cuMemcpyAsync": Rule("cuMemcpyAsync", "driver", "copy", "bytes"),
    "cuCtxSynchronize": Rule("cuCtxSynchronize", "driver", "sync"),
    "cuMemAlloc": Rule("cuMemAlloc", "driver", "alloc", "bytes"),
    "cuMemAllocManaged": Rule("cuMemAllocManaged", "driver", "alloc", "bytes"),
    # Block I/O: Ingero's args are [nr_sector, sector]; ours: bytes, arg0 = 0 read, 1 write, 2 discard.
    "block_read": Rule("block_io", "host", "io", "bytes", arg0_scale=512, fixed_arg0=0, ends_at_timestamp=True),
    "block_write": Rule("block_io", "host", "io", "bytes", arg0_scale=512, fixed_arg0=1, ends_at_timestamp=True),
    "block_discard": Rule("block_io", "host", "io", "bytes", arg0_scale=512, fixed_arg0=2, ends_at_timestamp=True),
    "tcp_retransmit": Rule("tcp_retransmit", "host", "net", "arg0", "arg1"),
    "net_send": Rule("net_send", "host", "net", "handle", "bytes", ends_at_timestamp=True),
    "net_recv": Rule("net_recv", "host", "net", "handle", "bytes", ends_at_timestamp=True),
    "graphBeginCapture": Rule("cudaStreamBeginCapture", "cuda", "lifecycle"),
    "graphEndCapture": Rule("cudaStreamEndCapture", "cuda", "lifecycle"),
    "graphInstantiate": Rule("cudaGraphInstantiate", "cuda", "lifecycle"),
    "graphLaunch": Rule("cudaGraphLaunch", "cuda", "launch"),
    "graphDestroy": Rule("cudaGraphDestroy", "cuda", "lifecycle"),
    "graphExecUpdate": Rule("cudaGraphExecUpdate", "cuda", "lifecycle"),
    "graphExecDestroy": Rule("cudaGraphExecDestroy", "cuda", "lifecycle"),
    "commInitRank": Rule("ncclCommInitRank", "nccl", "lifecycle"),
    "commDestroy": Rule("ncclCommDestroy", "nccl", "lifecycle"),
    "allReduce": Rule("ncclAllReduce", "nccl", "sync"),
    "allGather": Rule("ncclAllGather", "nccl", "sync"),
    "reduceScatter": Rule("ncclReduceScatter", "nccl", "sync"),
    "bcast": Rule("ncclBroadcast", "nccl", "sync"),
    "send": Rule("ncclSend", "nccl", "sync"),
    "recv": Rule("ncclRecv", "nccl", "sync"),
    "commInitAll": Rule("ncclCommInitAll", "nccl", "lifecycle"),
}


def ingero_op_name(source: int, op: int, lookup: dict[tuple[int, int], str]) -> str:
    """Ingero's name for a code: its source code first, the file's own lookup table next."""
    return OP_NAMES.get((source, op)) or lookup.get((source, op)) or f"ingero_{SOURCES.get(source, source)}_{op}"


def rule_for(name: str, source: int) -> Rule:
    """The rule for an Ingero op name; unknown ops keep their name and both arguments."""
    rule = RULES.get(name)
    if rule is not None:
        return rule
    ours = {1: "cuda", 4: "driver", 8: "cuda", 9: "nccl"}.get(source, "host")
    return Rule(name, ours, "lifecycle", "arg0", "arg1")


def convert_args(rule: Rule, arg0: int, arg1: int) -> dict[str, int]:
    """Our bytes/handle/stream/arg0/arg1 columns for one Ingero event."""
    cols = dict.fromkeys(COLUMNS, 0)
    if rule.arg0_to is not None:
        # Kept a 64-bit integer: a count this large scaled to bytes is not a real one (a changed file).
        cols[rule.arg0_to] = max(-(2**63), min(2**63 - 1, arg0 * rule.arg0_scale))
    if rule.arg1_to is not None:
        cols[rule.arg1_to] = arg1
    if rule.fixed_arg0 is not None:
        cols["arg0"] = rule.fixed_arg0
    return cols
