"""What a trace loads into the kernel, and how each BPF object is set up before it loads.

The host object (``host.bpf.o``) owns the maps every other object shares; the
CUDA uprobes (``cuda.bpf.o``), the optional host domains (``io``, ``net``,
``mem``) and the late-load watch (``loads.bpf.o``) reuse them. ``Tracer``
(``gpuscope.agent.tracer``) owns the objects: it creates, loads, attaches and
closes them; the functions here only set their constants, map sizes and
shared maps, between creating and loading.
"""

from __future__ import annotations

import os

from gpuscope.agent.options import TraceOptions
from gpuscope.bpf.loader import BpfObject

HOST_PROGRAMS = {
    "gs_sched_switch": "sched_switch",
    "gs_sched_wakeup": "sched_waking",
    "gs_process_fork": "sched_process_fork",
    "gs_process_exec": "sched_process_exec",
    "gs_process_exit": "sched_process_exit",
}
SHARED_MAPS = ("events", "aux_events", "targets", "stats")
# Optional host probe domains: object file -> {program: tracepoint}.
HOST_DOMAINS = {
    "io": {
        "gs_block_rq_insert": "block_rq_insert",
        "gs_block_rq_merge": "block_rq_merge",
        "gs_block_rq_issue": "block_rq_issue",
        "gs_block_rq_complete": "block_rq_complete",
    },
    "net": {"gs_tcp_retransmit": "tcp_retransmit_skb"},
    "mem": {
        "gs_mm_page_alloc": "mm_page_alloc",
        "gs_direct_reclaim_begin": "mm_vmscan_direct_reclaim_begin",
        "gs_direct_reclaim_end": "mm_vmscan_direct_reclaim_end",
        "gs_memcg_reclaim_begin": "mm_vmscan_memcg_reclaim_begin",
        "gs_memcg_reclaim_end": "mm_vmscan_memcg_reclaim_end",
        "gs_oom_mark_victim": "mark_victim",
    },
}
AUX_RING_BYTES = 1 << 20
LOAD_RING_BYTES = 256 << 10
LOAD_PROGRAMS = ("gs_vm_unmapped_area", "gs_agent_exit", "gs_hold_sweep")
STACK_RING_BYTES = 8 << 20


def configure_host(host: BpfObject, opts: TraceOptions) -> None:
    """Size the main ring and set the host object's switches; without ``opts.host`` only the fork hook loads."""
    host.set_max_entries("events", opts.ring_bytes)
    host.set_const("filter_targets", 1 if opts.filter_targets else 0)
    host.set_const("trace_wakeups", 1 if opts.wakeups else 0)
    if not opts.host:
        for prog in HOST_PROGRAMS:
            if prog != "gs_process_fork":
                host.disable(prog)


def configure_cuda(cuda: BpfObject, host: BpfObject, opts: TraceOptions, *, multi: bool) -> None:
    """Share the host's maps with the CUDA uprobes object and set its switches (``multi``: uprobe_multi links)."""
    for m in SHARED_MAPS:
        cuda.reuse_map(m, host.map_fd(m))
    # The host object keeps it at forks, execs and exits; the CUDA object's walks read it.
    cuda.reuse_map("py_procs", host.map_fd("py_procs"))
    cuda.set_const("filter_targets", 1 if opts.filter_targets else 0)
    cuda.set_const("entry_only", 1 if opts.entry_only else 0)
    cuda.set_const("stack_mode", opts.stacks)
    cuda.set_const("self_tgid", os.getpid())
    cuda.set_max_entries("stack_events", STACK_RING_BYTES)
    if multi:
        cuda.set_uprobe_multi("gs_cuda_entry")
        cuda.set_uprobe_multi("gs_cuda_return")
        cuda.set_uprobe_multi("gs_py_start")
    if opts.entry_only:
        cuda.disable("gs_cuda_return")


def configure_domain(obj: BpfObject, host: BpfObject) -> None:
    """Share the host's maps with an optional host domain's object."""
    obj.set_const("self_tgid", os.getpid())
    for m in SHARED_MAPS:
        obj.reuse_map(m, host.map_fd(m))


def configure_late_loads(loads: BpfObject, host: BpfObject, opts: TraceOptions, *, hold_max_ns: int) -> None:
    """Share the host's targets and counters with the late-load watch and set how long it may hold a process."""
    for m in ("targets", "stats"):
        loads.reuse_map(m, host.map_fd(m))
    loads.set_const("filter_targets", 1 if opts.filter_targets else 0)
    loads.set_const("self_tgid", os.getpid())
    loads.set_const("hold_enabled", 1 if opts.hold else 0)
    loads.set_const("hold_max_ns", hold_max_ns)
